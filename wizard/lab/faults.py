"""Named faults the lab can inject, so tests and the demo can show every failure path."""

from __future__ import annotations

FAULTS: dict[str, str] = {
    "containerd-1.7": "the GPU node runs containerd 1.7.27 (GPU Operator 26.7 needs >= 2.0)",
    "containerd-2.0.0": "the GPU node runs containerd 2.0.0, exactly the GPU Operator's minimum",
    "in-tree-ice": "the kernel's own ice/irdma: RDMA is dropped when the ports join bond1",
    "irdma-not-loaded": "the irdma module is not loaded (and not persisted)",
    "iwarp": "irdma runs in iWARP mode instead of RoCEv2 (no roce_ena=1)",
    "bond-slave-down": "the second bond1 slave is down (MII down, own aggregator)",
    "bond-split-nics": "bond1's slaves are ports of two different E810 NICs",
    "iommu-translated": "the IOMMU default domain is Translated (not off or passthrough)",
    "acs-enabled": "ACS is on (SrcValid+) on the PCIe root port above the GPU and NIC",
    "gpu-missing": "one of the eight B300 GPUs is missing from the PCI bus",
    "nccl-socket": "NCCL falls back to sockets (no RDMA): channels via NET/Socket",
    "ssh-over-bond1": "the wizard's SSH session reaches the node over bond1",
    "slow-ssh": "every command on the GPU node takes a second longer",
    "ssh-drop": "the SSH connection to the GPU node drops in the middle of a command",
    "pfc-not-applied": "the second E810 port acknowledges `dcb pfc set` but keeps PFC off",
    "not-joined": "the GPU nodes are not in the cluster yet; the site names the lab's stand-in "
    "Kubespray checkout and the wizard runs the join with ansible-playbook",
    "operator-preinstalled": "GPU Operator v26.3.3 already runs (release gpu-operator-1764547200, "
    "user values) with another GPU node, gpu-h100-01, in the cluster",
    "existing-rdma-plugin": "the cluster already runs the upstream RDMA shared device plugin "
    "(kube-system/rdma-devices, rdma-shared-dp-ds) serving rdma/hca on an H100 ConnectX node, "
    "gpu-h100-01",
    "containerd-imports-dropped": "a later Kubespray run re-templated config.toml without the "
    "toolkit's imports line: the nvidia runtime drop-in is ignored",
    "operator-crashloop": "the gpu-operator controller pod is in CrashLoopBackOff",
    "plugin-missing-resource": "the RDMA device plugin runs but advertises no resource",
    "peer-qos-missing": "the AIStor peer's NIC has no DSCP 24 -> priority 3 map and no PFC",
    "ddp-safe-mode": "ice found no DDP package and runs in Safe Mode (no DCB, no RDMA)",
    "nccl-no-transport": "the NCCL image forces NCCL_NET=IB and its ranks see no RDMA device: 'No transport found'",
    "no-mpi-operator": "the Kubeflow MPI Operator is not installed (no mpijobs.kubeflow.org CRD)",
    "perftest-no-cuda": "the CUDA perftest image's perftest was built without CUDA",
    "port-drops": "the GPU node's E810 ports drop packets under RDMA load (rx_dropped.nic rises)",
    "lag-dcb-mismatch": "bond1 formed while its two ports had different DCB: Intel's LAG turned RDMA off",
    "ddp-default": "ice loaded the ICE OS Default DDP package, which does not support LAG: both "
    "bonded PFs keep their own RDMA device (no RoCE LAG)",
    "nvm-no-roce-lag": "the E810 NVM lacks the roce_lag capability: with the comms DDP package "
    "too, both bonded PFs keep their own RDMA device (no RoCE LAG)",
    "kernel-update": "dnf update installed a newer kernel, now the default boot entry, whose "
    "module tree has only the in-tree ice/irdma (no DKMS rebuild, no weak-modules link)",
    "kernel-update-weak-modules": "dnf update installed a newer kernel; Intel's kmod package's "
    "weak-modules linked its ice/irdma into the new kernel's weak-updates/",
    "headers-other-kernel": "the node has kernel-devel for a newer kernel, not the running one "
    "(an unversioned `dnf install kernel-devel` took the newest)",
    "peer-mtu-1500": "the AIStor peer's bond is at MTU 1500 (jumbo frames not end to end): its "
    "RoCE active_mtu is 1024 against the node's 4096",
    "nic-on-cpu-root-port": "the E810 is an add-in card on a CPU root port, NODE from every GPU "
    "(the usual HGX B300 layout): GPUDirect works, NCCL's default GDR level will not use it",
    "irdma-probe-pf1-failed": "the NVM lacks roce_lag (no RoCE LAG) and irdma failed to probe "
    "the second PF: one RDMA device on the bond, as if LAG were active (two ice.roce aux devices)",
    "leftover-module-tree": "an old, removed kernel left its /lib/modules tree behind (in-tree "
    "ice only); no /boot/vmlinuz for it, nothing can boot it",
    "dmesg-rotated": "a long uptime rotated ice's boot messages (the DDP package line) out of "
    "the kernel's ring buffer",
    "roce-tos-reset": "bond1 re-forms under the QoS load (LACP renegotiates): the re-registered "
    "RDMA device's default_roce_tos is 0 again, so rdma_cm connections without -T leave priority 3",
}


def check_faults(names: list[str] | tuple[str, ...]) -> list[str]:
    """Validate fault names; raise ValueError naming the unknown ones."""
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(
            f"unknown fault(s): {', '.join(unknown)}; `gpu-node-wizard lab --list-faults` lists them"
        )
    return list(names)
