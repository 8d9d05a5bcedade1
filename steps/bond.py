"""Phase 4, bond1: LACP state and the rule that both slaves are ports of one E810 (T10)."""

from __future__ import annotations

from steps.common import bonding_command, read_lines
from wizard.facts.nic import Bonding, parse_bonding, parse_ethtool_i
from wizard.facts.pci import split_function
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Step, StepContext
from wizard.probe import Probe, Read, Report, read_all
from wizard.site import Node, Site


def evaluate_bond(
    node: Node, bond: Bonding, bus_info: dict[str, str | None], report: Report, p: Probe
) -> None:
    name = node.bond.name
    evidence = p.evidence(
        lambda line: line.startswith(
            (
                "Bonding Mode",
                "Transmit Hash",
                "MII Status",
                "Slave Interface",
                "Aggregator ID",
                "\tAggregator ID",
                "Speed",
            )
        )
    )
    if bond.is_8023ad:
        report.ok("mode", f"{name} is {bond.mode}", evidence)
    else:
        report.fail(
            "mode",
            f"{name} is '{bond.mode}', not IEEE 802.3ad (LACP)",
            f"configure {name} with mode=802.3ad (NetworkManager: bond.options mode=802.3ad)",
            evidence,
        )
    wanted_hash = node.bond.xmit_hash_policy
    if bond.transmit_hash_policy == wanted_hash:
        report.ok("hash-policy", f"transmit hash policy {wanted_hash}")
    else:
        report.fail(
            "hash-policy",
            f"transmit hash policy is {bond.transmit_hash_policy or 'not shown'}, expected {wanted_hash}",
            f"set xmit_hash_policy={wanted_hash} on {name}",
            evidence,
        )
    if bond.mii_status != "up":
        report.fail(
            "mii",
            f"{name} MII status is {bond.mii_status}",
            "check both links and the switch",
            evidence,
        )
    slaves = {s.name: s for s in bond.slaves}
    expected = set(node.bond.ports)
    if set(slaves) != expected:
        report.fail(
            "slaves",
            f"{name} slaves are {', '.join(sorted(slaves)) or 'none'}, the site says {', '.join(sorted(expected))}",
            "enslave exactly the two E810 ports, or correct nodes[].bond.ports",
            evidence,
        )
    down = [s for s in bond.slaves if s.mii_status != "up"]
    for slave in down:
        report.fail(
            f"slave-{slave.name}",
            f"slave {slave.name} is {slave.mii_status} (link failures: {slave.link_failure_count})",
            "check the cable/optic and the switch port, and that the switch side is in the same LAG",
            evidence,
        )
    aggregators = {s.aggregator_id for s in bond.slaves if s.aggregator_id is not None}
    active = bond.active_aggregator_id
    strays = [
        s.name for s in bond.slaves if active is not None and s.aggregator_id not in (None, active)
    ]
    if strays:
        report.fail(
            "aggregator",
            f"{', '.join(strays)} not in the active aggregator {active}: LACP did not bundle them",
            "both switch ports must be in the same LACP port-channel (MLAG pair if two switches)",
            evidence,
        )
    elif len(aggregators) > 1:
        report.fail(
            "aggregator",
            f"slaves are in different aggregators {sorted(aggregators)}",
            "both switch ports must be in the same LACP port-channel",
            evidence,
        )
    elif not down and set(slaves) == expected:
        aggregator = active if active is not None else next(iter(aggregators), "?")
        report.ok("lacp", f"both slaves up in aggregator {aggregator}")
    bases = {port: split_function(bus)[0] for port, bus in bus_info.items() if bus}
    if len(bases) == len(expected) and len(set(bases.values())) == 1:
        report.ok(
            "same-nic", f"both slaves are functions of one E810 ({next(iter(bases.values()))})"
        )
    elif len(bases) == len(expected):
        detail = ", ".join(f"{port} at {bus}" for port, bus in bus_info.items())
        report.fail(
            "same-nic",
            f"the slaves are on two different NICs ({detail}): Intel's RDMA over LAG needs both "
            "ports of the same E810",
            "re-cable so that bond1 uses the two ports of one E810 and update nodes[].bond.ports",
        )
    else:
        report.warn(
            "same-nic", "could not read both ports' PCI addresses", "run the E810 phase first"
        )


def lacp_reads(node: Node) -> list[Read]:
    """The bond's state, each port's PCI address (both must be functions of one E810), and
    the kernel's own view of the bond, kept as evidence (seed 000 section 6)."""
    return [
        Read(bonding_command(node), parse_bonding),
        *(
            Read(["ethtool", "-i", port], parse_ethtool_i, note="bus-info")
            for port in node.bond.ports
        ),
        Read(["ip", "-d", "link", "show", node.bond.name], note="kept as evidence"),
    ]


class Lacp(Step):
    id = "bond.lacp"
    title = "bond1 is a healthy 802.3ad bond of one E810's two ports"
    kind = StepKind.CHECK
    gates = ("T10",)
    reads = ("node.bond",)
    explain = (
        "The bond is IEEE 802.3ad with layer3+4 hashing, MII up, every slave up and in the "
        "active aggregator, and both slaves are functions of the same E810 device (same PCI "
        "bus and device, different function): Intel's RDMA-over-LAG needs both ports on one NIC."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(lacp_reads(node)) if node else []

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T10")
        ports = list(ctx.node.bond.ports)
        p, *infos, details = await read_all(ctx, *lacp_reads(ctx.node))
        if details.result.ok:
            report.ok("bond-details", f"ip -d link show {ctx.node.bond.name} (kept as evidence)",
                      details.evidence())  # fmt: skip
        if not p.ok:
            report.unreadable("mode", p, f"/proc/net/bonding/{ctx.node.bond.name}")
            return report.findings
        bus_info = {
            port: info.fact.bus_info if info.ok else None
            for port, info in zip(ports, infos, strict=True)
        }
        evaluate_bond(ctx.node, p.fact, bus_info, report, p)
        return report.findings


PHASE = Phase(
    read_only=True,
    id="bond",
    number=4,
    title="bond1 (LACP)",
    summary="Check the cluster-internal bond before RDMA is layered on it.",
    steps=(Lacp(),),
)
