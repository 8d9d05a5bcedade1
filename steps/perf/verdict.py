"""How a measurement is judged and reported: bandwidth against the port's line rate, and
what DCQCN's counters say about congestion over the suite."""

from __future__ import annotations

from steps.perf.counters import _delta
from wizard.facts.perftest import Perftest
from wizard.plan import StepContext
from wizard.probe import Report


def judge_bandwidth(
    report: Report,
    name: str,
    label: str,
    fact: Perftest,
    port_rate: float | None,
    minimum_percent: int,
    gate: str,
    cap: float | None = None,
) -> float | None:
    """Bandwidth against the port's line rate; against ``cap`` (Gb/s) instead when the run
    was rate-limited for a production peer, where more QPs cannot help (perftest's SW
    limiter paces the whole process) and line rate is not proven."""
    gbps = fact.best_bw_gbps
    if gbps is None:
        report.fail(
            name, f"{label}: no bandwidth in the output", "read the perftest output", gate=gate
        )
        return None
    if cap is not None:
        percent = 100 * gbps / cap
        text = (
            f"{label}: {gbps:.1f} Gb/s = {percent:.0f}% of the {cap:g} Gb/s cap on the "
            "production peer (aistor.load_rate_gbps); line rate is not proven against it"
        )
        if percent >= minimum_percent:
            report.ok(name, text, gate=gate)
        else:
            report.warn(
                name,
                text + f" (below {minimum_percent}% of the cap)",
                "check MTU 4096, PCIe width and the switch; for line rate, measure against a "
                "peer with production: false",
                gate=gate,
            )
        return gbps
    if port_rate:
        percent = 100 * gbps / port_rate
        text = f"{label}: {gbps:.1f} Gb/s = {percent:.0f}% of one {port_rate:.0f} Gb/s port"
        if percent >= minimum_percent:
            report.ok(name, text, gate=gate)
        else:
            report.warn(
                name,
                text + f" (below {minimum_percent}%)",
                "try more QPs (-q 4/8), check MTU 4096, PCIe width and the switch",
                gate=gate,
            )
    else:
        report.ok(name, f"{label}: {gbps:.1f} Gb/s (line rate unknown)", gate=gate)
    return gbps


def report_congestion(
    ctx: StepContext,
    report: Report,
    series: str,
    before: dict[str, dict[str, int]],
    after: dict[str, dict[str, int]],
    *,
    qos: bool,
) -> None:
    """DCQCN's counters on both ends over the suite, recorded and explained."""
    gate = "T08" if qos else "T07"
    parts = []
    for end in ("node", "far end"):
        delta = _delta(after[end], before[end])
        for name, value in delta.items():
            ctx.record(
                f"{series}.congestion.{end.replace(' ', '_')}.{name}", float(value), "packets"
            )
        if delta:
            parts.append(f"{end}: " + ", ".join(f"{k} +{v}" for k, v in sorted(delta.items())))
    if not parts:
        report.skip("congestion-counters", "the RDMA devices show no CNP/ECN counters", gate=gate)
        return
    ecn = ctx.site.qos.ecn and qos
    marked = any(after[e].get("RxECNMrkd", 0) > before[e].get("RxECNMrkd", 0) for e in after)
    note = (
        "ECN marks and CNPs: DCQCN is reacting to congestion"
        if marked
        else "no ECN marks: " + ("the switch marked nothing" if ecn else "ECN is off")
    )
    report.ok("congestion-counters", f"CNP / ECN over the suite ({note}): {'; '.join(parts)}",
              gate=gate)  # fmt: skip
