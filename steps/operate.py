"""Phase 16, real workload, soak, and reboot survival (T15, T16, T17)."""

from __future__ import annotations

from steps.common import bond_name, q
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site


class Vllm(Step):
    id = "operate.vllm"
    title = "vLLM serving benchmark"
    kind = StepKind.MEASURE
    gates = ("T15",)
    explain = "An operator-configured vLLM serving benchmark on the node; numbers recorded."


class Soak(Step):
    id = "operate.soak"
    title = "Soak: repeated RDMA load"
    kind = StepKind.MEASURE
    gates = ("T16",)
    explain = (
        "Repeated RDMA load for the configured duration while error, link-flap and pause "
        "counters are sampled; a pass needs stable bandwidth and no errors."
    )


class Reboot(Step):
    id = "operate.reboot"
    title = "Reboot and re-verify everything"
    kind = StepKind.MAINTENANCE
    gates = ("T17",)
    reads = ("qos", "node.bond", "node.gpu_count")
    explain = (
        "The node reboots; the wizard records 'waiting for reboot' (it may be closed and "
        "resumed), waits for SSH with a new boot id, then re-verifies irdma, RoCEv2, the "
        "bond, QoS on both ports, the GPU count and node allocatable."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = q(node.name) if node else "<node>"
        return [
            f"kubectl drain {name} --ignore-daemonsets --delete-emptydir-data --timeout=10m",
            "cat /proc/sys/kernel/random/boot_id",
            "systemctl reboot",
            "cat /proc/sys/kernel/random/boot_id  # must differ",
            f"cat /proc/net/bonding/{q(bond_name(node))}",
            f"kubectl uncordon {name}",
        ]


PHASE = Phase(
    id="operate",
    number=16,
    title="Workload, soak and reboot",
    summary="A real workload, a soak under load, and proof that everything survives a reboot.",
    steps=(Vllm(), Soak(), Reboot()),
)
