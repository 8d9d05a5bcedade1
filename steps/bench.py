"""Operator-configured benchmarks (AIStor S3 client, vLLM): run, record the headline number."""

from __future__ import annotations

import re

from wizard.plan import StepContext
from wizard.probe import Report
from wizard.site import Benchmark


def benchmark_lines(bench: Benchmark | None, field: str) -> list[str]:
    """The runbook line of a configured benchmark: its command, run on the node as written."""
    if bench is None:
        return [f"# not configured (measurements.{field} in the site file)"]
    return [bench.command]


async def run_benchmark(
    ctx: StepContext,
    report: Report,
    name: str,
    bench: Benchmark | None,
    what: str,
    *,
    timeout: float = 3600,
) -> float | None:
    if bench is None:
        report.skip(
            name,
            f"no {what} benchmark configured (measurements.{name.replace('-', '_')} in the site file)",
        )
        return None
    result = await ctx.run(bench.command, timeout=timeout)
    ctx.data[f"{name}_output"] = result.stdout[-4000:]
    match = re.search(bench.metric_regex, result.stdout)
    if result.exit_status != 0 or match is None:
        reason = (
            f"exited {result.exit_status}"
            if result.exit_status
            else "its output has no match for metric_regex"
        )
        report.fail(
            name,
            f"{what}: `{bench.command}` {reason}",
            "run it by hand and adjust the command or regex",
        )
        return None
    value = float(match.group("value"))
    ctx.record(f"{name}", value, bench.unit)
    report.ok(name, f"{what}: {value} {bench.unit}")
    return value
