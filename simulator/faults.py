"""Named faults the lab can inject, so tests and the demo can show every failure path.

The lab without faults is a brownfield production cluster (simulator/existing.py); the
first three below are the named variants of that cluster, the others faults of a host."""

from __future__ import annotations

from enum import StrEnum

FAULTS: dict[str, str] = {
    "greenfield": "a cluster built for the wizard instead of the default production one: the GPU "
    "nodes already joined, no other GPU node, no GPU Operator, no RDMA plugin, no workloads",
    "operator-preinstalled": "the existing GPU Operator release is older, v26.3.3 "
    "(gpu-operator-1764547200) with other user values: the wizard's release is an upgrade "
    "that restarts operands on the existing GPU node gpu-h100-01",
    "operator-other-values": "the existing GPU Operator release is at the site's pinned version "
    "but its values lack the wizard's dcgmExporter settings (an earlier addition predates the "
    "DCGM metrics check): the wizard's release is an upgrade that rolls nvidia-dcgm-exporter on "
    "the existing GPU node gpu-h100-01; runs on the real control plane too (chart v26.7.0)",
    "operator-other-namespace": "the existing GPU Operator release (pinned version and values) is "
    "in namespace nvidia-gpu-operator, not gpu-operator (helm list -A names each release's "
    "namespace): every later step acts on that namespace and creates nothing in gpu-operator",
    "pull-secret-other-data": "the site's pull secret default/nexus-pull already exists with other "
    "data (an entry for another registry, registry.corp.internal, and none for the mirror): the "
    "wizard's entry is an update of an existing object, approved as pull-secret-update",
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
    "gpu-xid": "GPU 3 of the GPU node reported XID 79 (fallen off the bus): dcgm-exporter's "
    "DCGM_FI_DEV_XID_ERRORS is 79 for it",
    "nccl-socket": "NCCL falls back to sockets (no RDMA): channels via NET/Socket",
    "ssh-over-bond1": "the wizard's SSH session reaches the node over bond1",
    "ssh-over-bond1-vlan": "the wizard's SSH session reaches the node over a VLAN on bond1 "
    "(bond1.100, its address there, not on bond1)",
    "slow-ssh": "every command on the GPU node takes a second longer",
    "peer-slow-ssh": "every command on the AIStor peer takes a second longer (a loaded storage "
    "node, a jump host): a one-shot perftest or iperf3 server there listens after the client "
    "would start",
    "ssh-drop": "the SSH connection to the GPU node drops in the middle of a command",
    "pfc-not-applied": "the second E810 port acknowledges `dcb pfc set` but keeps PFC off",
    "not-joined": "with greenfield: the GPU nodes are not in the cluster yet (the default lab's "
    "case); the site names the lab's stand-in Kubespray checkout and the wizard runs the join",
    "existing-rdma-plugin": "with greenfield: the cluster already runs the upstream RDMA shared "
    "device plugin (kube-system/rdma-devices, rdma-shared-dp-ds) serving rdma/hca on an H100 "
    "ConnectX node, gpu-h100-01 (the default lab has it)",
    "containerd-imports-dropped": "a later Kubespray run re-templated config.toml without the "
    "toolkit's imports line: the nvidia runtime drop-in is ignored",
    "operator-crashloop": "the gpu-operator controller pod is in CrashLoopBackOff",
    "plugin-missing-resource": "the RDMA device plugin runs but advertises no resource",
    "peer-qos-missing": "the AIStor peer's NIC has no DSCP 24 -> priority 3 map and no PFC",
    "ddp-safe-mode": "ice found no DDP package and runs in Safe Mode (no DCB, no RDMA)",
    "nccl-no-transport": "the NCCL image forces NCCL_NET=IB and its ranks see no RDMA device: 'No transport found'",
    "no-mpi-operator": "the Kubeflow MPI Operator is not installed (no mpijobs.kubeflow.org CRD)",
    "perftest-no-cuda": "the CUDA perftest image's perftest was built without CUDA",
    "perftest-no-cpu-mhz": "perftest on the GPU node cannot read the CPU frequency: its SW rate "
    "limiter says so and the run goes unlimited (perftest_resources.c run_iter_bw)",
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
    "nm-duplicate-profile": "NetworkManager keeps, besides each bond port's profile, an old "
    "standalone ethernet profile of the same name for the same device, listed first: nmcli "
    "picks it for `connection up NAME`, and the port comes up outside the bond",
    "roce-tos-reset": "bond1 re-forms under the QoS load (LACP renegotiates): the re-registered "
    "RDMA device's default_roce_tos is 0 again, so rdma_cm connections without -T leave priority 3",
}


class Fault(StrEnum):
    """The lab's faults as typed names (the value is the spelling ``--fault`` takes and
    FAULTS describes): the lab's models compare a host's faults with these, and
    tests/test_phase_capabilities.py finds every fault name the simulator compares and
    checks it is one of them (a misspelt fault would silently never fire).
    """

    CONTAINERD_1_7 = "containerd-1.7"
    CONTAINERD_2_0_0 = "containerd-2.0.0"
    IN_TREE_ICE = "in-tree-ice"
    IRDMA_NOT_LOADED = "irdma-not-loaded"
    IWARP = "iwarp"
    NM_DUPLICATE_PROFILE = "nm-duplicate-profile"
    BOND_SLAVE_DOWN = "bond-slave-down"
    BOND_SPLIT_NICS = "bond-split-nics"
    IOMMU_TRANSLATED = "iommu-translated"
    ACS_ENABLED = "acs-enabled"
    GPU_MISSING = "gpu-missing"
    GPU_XID = "gpu-xid"
    GREENFIELD = "greenfield"
    PERFTEST_NO_CPU_MHZ = "perftest-no-cpu-mhz"
    NCCL_SOCKET = "nccl-socket"
    SSH_OVER_BOND1 = "ssh-over-bond1"
    SSH_OVER_BOND1_VLAN = "ssh-over-bond1-vlan"
    SLOW_SSH = "slow-ssh"
    PEER_SLOW_SSH = "peer-slow-ssh"
    SSH_DROP = "ssh-drop"
    PFC_NOT_APPLIED = "pfc-not-applied"
    NOT_JOINED = "not-joined"
    OPERATOR_PREINSTALLED = "operator-preinstalled"
    OPERATOR_OTHER_VALUES = "operator-other-values"
    OPERATOR_OTHER_NAMESPACE = "operator-other-namespace"
    PULL_SECRET_OTHER_DATA = "pull-secret-other-data"
    EXISTING_RDMA_PLUGIN = "existing-rdma-plugin"
    CONTAINERD_IMPORTS_DROPPED = "containerd-imports-dropped"
    OPERATOR_CRASHLOOP = "operator-crashloop"
    PLUGIN_MISSING_RESOURCE = "plugin-missing-resource"
    PEER_QOS_MISSING = "peer-qos-missing"
    DDP_SAFE_MODE = "ddp-safe-mode"
    NCCL_NO_TRANSPORT = "nccl-no-transport"
    NO_MPI_OPERATOR = "no-mpi-operator"
    PERFTEST_NO_CUDA = "perftest-no-cuda"
    PORT_DROPS = "port-drops"
    LAG_DCB_MISMATCH = "lag-dcb-mismatch"
    DDP_DEFAULT = "ddp-default"
    NVM_NO_ROCE_LAG = "nvm-no-roce-lag"
    KERNEL_UPDATE = "kernel-update"
    KERNEL_UPDATE_WEAK_MODULES = "kernel-update-weak-modules"
    HEADERS_OTHER_KERNEL = "headers-other-kernel"
    PEER_MTU_1500 = "peer-mtu-1500"
    NIC_ON_CPU_ROOT_PORT = "nic-on-cpu-root-port"
    IRDMA_PROBE_PF1_FAILED = "irdma-probe-pf1-failed"
    LEFTOVER_MODULE_TREE = "leftover-module-tree"
    DMESG_ROTATED = "dmesg-rotated"
    ROCE_TOS_RESET = "roce-tos-reset"


def check_faults(names: list[str] | tuple[str, ...]) -> list[str]:
    """Validate fault names; raise ValueError naming the unknown ones."""
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(
            f"unknown fault(s): {', '.join(unknown)}; `gpu-node-wizard lab --list-faults` lists them"
        )
    return list(names)
