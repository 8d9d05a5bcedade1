"""The lab's real control plane: kube-apiserver, etcd, kube-controller-manager,
kube-scheduler and helm built from their own Go modules (``build``), served on loopback
(``serve``), with the lab playing only the kubelets (``kubelets``)."""
