"""The far end: lossless RoCE needs the AIStor peers' NICs to classify DSCP 24 to priority 3
and pause on priority 3 too (seed 000 section 28: PFC works per hop and per end; a peer that
sends RoCE on priority 0 or ignores pause frames drops under load)."""

from __future__ import annotations

from steps.common import RDMA_LINKS, on_host, shown
from steps.qos.probes import dcb_show
from wizard.facts.dcb import parse_dcb_app, parse_dcb_pfc
from wizard.model import Finding, StepKind
from wizard.plan import Scope, Step, StepContext
from wizard.probe import Report, probe
from wizard.site import AIStorPeer, Node, Site


def peer_remedy(site: Site, netdev: str) -> str:
    qos = site.qos
    pfc = ",".join("1" if p == qos.priority else "0" for p in range(8))
    return (
        f"on the AIStor node: a ConnectX with `mlnx_qos -i {netdev} --trust dscp --pfc {pfc}` and "
        f"`mlnx_qos -i {netdev} --dscp2prio set,{qos.dscp},{qos.priority}`; an E810 with the same "
        f"dcb commands as the GPU nodes (the port functions of nodes/<node>/qos/apply-qos.sh); "
        "or ask the AIStor team"
    )


class PeerQos(Step):
    id = "qos.peers"
    title = "The AIStor peers classify DSCP 24 -> priority 3 with PFC on priority 3"
    kind = StepKind.CHECK
    gates = ("T08",)
    scope = Scope.CLUSTER
    reads = ("qos", "aistor")
    explain = (
        "Lossless RoCE needs both ends: each AIStor peer's RDMA port must map DSCP 24 to "
        "priority 3 and have PFC on priority 3 (the wizard reads it; the peers are not the "
        "wizard's to change). A peer without it is a failure with the commands for its NIC."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        lines = []
        for peer in site.aistor.peers:
            lines += [
                shown(RDMA_LINKS, on_host(peer.name, "its RDMA device and netdev")),
                shown(dcb_show("app", "<peer-netdev>"), on_host(peer.name)),
                shown(dcb_show("pfc", "<peer-netdev>"), on_host(peer.name)),
            ]
        return lines

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T08")
        if not ctx.site.aistor.peers:
            report.skip("peer-qos", "no AIStor peer in the site file")
        for peer in ctx.site.aistor.peers:
            await self._one(ctx, peer, report)
        return report.findings

    async def _one(self, ctx: StepContext, peer: AIStorPeer, report: Report) -> None:
        qos = ctx.site.qos
        check = f"peer-qos-{peer.name}"
        links = await probe(ctx, RDMA_LINKS, on=peer.name)
        if not links.ok:
            report.unreadable(check, links, f"the RDMA devices of {peer.name}")
            return
        link = next((lk for lk in links.fact.links if peer.rdma_device in (None, lk.device)), None)
        if link is None or not link.netdev:
            report.fail(check, f"{peer.name} shows no RDMA device with a netdev",
                        "check the AIStor node's RDMA setup", links.evidence())  # fmt: skip
            return
        app = await probe(ctx, dcb_show("app", link.netdev), parse_dcb_app, on=peer.name)
        pfc = await probe(ctx, dcb_show("pfc", link.netdev), parse_dcb_pfc, on=peer.name)
        if not pfc.ok:
            report.unreadable(check, pfc, f"the PFC of {peer.name} {link.netdev}")
            return
        mapped = app.fact.priorities_for(qos.dscp) if app.ok else []
        paused = pfc.fact.enabled()
        problems = []
        if mapped != [qos.priority]:
            problems.append(f"DSCP {qos.dscp} -> {mapped or 'nothing'} (want {qos.priority})")
        if qos.priority not in paused:
            problems.append(f"PFC on {list(paused) or 'no priority'} (want {qos.priority})")
        if problems:
            report.fail(
                check,
                f"{peer.name} {link.netdev}: {'; '.join(problems)}: RoCE to and from it is not "
                "lossless",
                peer_remedy(ctx.site, link.netdev),
                app.evidence(),
                pfc.evidence(),
            )
        else:
            report.ok(check, f"{peer.name} {link.netdev}: DSCP {qos.dscp} -> priority "
                             f"{qos.priority}, PFC on priority {qos.priority}")  # fmt: skip
