"""The read-only checks against the lab: the clean lab passes, and every host fault fails
(or warns) exactly the check it should, with a remediation."""

from __future__ import annotations

import io
import json
import subprocess
import time
from pathlib import Path

import pytest

from frontend.headless import HeadlessFrontEnd
from frontend.runner import Outcome, run_checks
from simulator.faults import FAULTS
from simulator.lab import Lab
from steps import build_plan
from tests.conftest import run_cli, served_lab
from wizard.model import Severity
from wizard.site import load_site


async def check_lab(
    tmp_path: Path, *faults: str, nodes: int = 1, lab_out: list | None = None
) -> Outcome:
    async with Lab(tmp_path / "lab", nodes=nodes, faults=faults, slow_seconds=0.1) as lab:
        if lab_out is not None:
            lab_out.append(lab)
        site = load_site(lab.site_path)
        frontend = HeadlessFrontEnd(out=io.StringIO())
        return await run_checks(site, build_plan(), tmp_path / "state", frontend)


def by_check(outcome: Outcome) -> dict[str, list]:
    result: dict[str, list] = {}
    for _, target, finding in outcome.findings:
        result.setdefault(finding.check, []).append((target, finding))
    return result


async def test_clean_lab_passes_every_check(tmp_path):
    outcome = await check_lab(tmp_path)
    bad = [
        (t, f.check, f.message) for _, t, f in outcome.findings if f.severity is not Severity.PASS
    ]
    assert bad == []
    assert outcome.exit_code == 0
    checks = by_check(outcome)
    for expected in (
        "T00.os-supported",
        "T00.containerd-version",
        "T00.gpu-count",
        "T00.kubernetes-version",
        "T00.helm",
        "T02.driver-ens5f0np0",
        "T02.roce",
        "T02.packages",
        "T10.lacp",
        "T10.same-nic",
        "T10.ssh-path",
        "T11.iommu",
        "T11.acs",
    ):
        assert expected in checks, expected


EXPECTED = {
    # fault: (check, severity, words in the message, words in the remediation)
    "containerd-1.7": (
        "T00.containerd-version",
        Severity.FAIL,
        "1.7.27 is too old",
        "upgrade containerd",
    ),
    "in-tree-ice": ("T02.driver-ens5f0np0", Severity.FAIL, "in-tree ice", "Intel's ice and irdma"),
    "irdma-not-loaded": ("T02.modules", Severity.FAIL, "irdma", "modprobe irdma"),
    "iwarp": ("T02.roce", Severity.FAIL, "iWARP", "roce_ena=1"),
    "bond-slave-down": ("T10.slave-ens5f1np1", Severity.FAIL, "is down", "switch port"),
    "bond-split-nics": ("T10.same-nic", Severity.FAIL, "two different NICs", "re-cable"),
    "iommu-translated": ("T11.iommu", Severity.WARN, "Translated", "iommu=pt"),
    "acs-enabled": ("T11.acs", Severity.WARN, "SrcValid+", "disable ACS"),
    "gpu-missing": ("T00.gpu-count", Severity.FAIL, "only 7 of 8", "BMC"),
    "ssh-over-bond1": ("T10.ssh-path", Severity.WARN, "runs over bond1", "oob_host"),
    "ssh-over-bond1-vlan": ("T10.ssh-path", Severity.WARN, "runs over bond1", "oob_host"),
    "ddp-safe-mode": ("T02.ddp", Severity.FAIL, "Safe Mode", "DDP package"),
    "lag-dcb-mismatch": (
        "T02.lag-rdma",
        Severity.FAIL,
        "with different DCB config",
        "same DCB to both",
    ),
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
async def test_each_host_fault_fails_the_right_check(tmp_path, fault):
    check, severity, message, fix = EXPECTED[fault]
    outcome = await check_lab(tmp_path, fault)
    found = by_check(outcome).get(check)
    assert found, f"{fault}: no {check} finding"
    _, finding = found[0]
    assert finding.severity is severity, finding
    assert message in finding.message
    assert fix in finding.remediation
    assert outcome.exit_code == (1 if severity is Severity.FAIL else 0)
    # Nothing else fails: the fault is pinned to its check (in-tree ice also loses RDMA).
    others = {
        f.check for _, _, f in outcome.findings if f.severity is Severity.FAIL and f.check != check
    }
    allowed = {
        "in-tree-ice": {"T02.driver-ens5f1np1", "T02.rdma-device", "T02.module-ice"},
        "irdma-not-loaded": {"T02.rdma-device"},
        "lag-dcb-mismatch": {"T02.rdma-device"},  # its consequence: no RDMA device on the bond
        "bond-slave-down": {"T10.aggregator"},
    }.get(fault, set())
    assert others <= allowed, others


async def test_ssh_drop_mid_command_is_reported_then_recovered(tmp_path):
    outcome = await check_lab(tmp_path, "ssh-drop")
    dropped = [f for _, _, f in outcome.findings if f.check.endswith(".reachable")]
    assert len(dropped) == 1
    assert "dropped while running" in dropped[0].message
    assert "may or may not have completed" in dropped[0].message
    assert outcome.exit_code == 2
    # The transport reconnected: later steps on the same node passed.
    assert by_check(outcome)["T10.lacp"][0][1].severity is Severity.PASS


async def test_slow_ssh_still_passes(tmp_path):
    labs: list = []
    started = time.monotonic()
    outcome = await check_lab(tmp_path, "slow-ssh", lab_out=labs)
    assert outcome.exit_code == 0
    commands = len(labs[0].hosts["gpu-b300-01"].commands)
    assert commands > 20
    assert time.monotonic() - started > 0.1 * commands / 8  # every command waited (8 channels)


async def test_two_nodes_are_checked_concurrently(tmp_path):
    outcome = await check_lab(tmp_path, nodes=2)
    targets = {t for _, t, _ in outcome.findings}
    assert targets == {"cluster", "gpu-b300-01", "gpu-b300-02"}


async def test_a_fleet_check_groups_the_nodes_that_passed_and_lists_the_one_that_failed(tmp_path):
    progress = io.StringIO()
    async with Lab(tmp_path / "lab", nodes=8) as lab:
        lab.hosts["gpu-b300-03"].state.gpu_count = 7
        site = load_site(lab.site_path)
        frontend = HeadlessFrontEnd(out=progress, show_findings=False, compact=True)
        outcome = await run_checks(site, build_plan(), tmp_path / "state", frontend)
    assert outcome.exit_code == 1
    lines = progress.getvalue().splitlines()
    assert "   gpu-b300-03: preflight.gpus: failed" in lines
    assert (
        "   preflight.gpus: done on 7 nodes (gpu-b300-01 ... gpu-b300-08); failed on gpu-b300-03"
        in lines
    )
    assert not any(line.startswith("   gpu-b300-01:") for line in lines)  # passed: grouped
    text = outcome.format()
    assert "  gpu-b300-03\n    [FAIL] T00.gpu-count: only 7 of 8" in text
    assert "more passed)" in text
    assert "every check passed on 7 nodes (gpu-b300-01 ... gpu-b300-08) and the cluster" in text
    assert "[PASS]" not in text


def test_faults_are_listed():
    result = run_cli("lab", "--list-faults")
    assert result.returncode == 0, result.stderr
    assert {line.split()[0] for line in result.stdout.splitlines()} == set(FAULTS)


def test_lab_then_check_from_another_process(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    with served_lab(site, "gpu-missing"):
        result = run_cli("check", str(site), "--json", "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    # T10 is proven by preflight.ssh-path and bond.lacp (both run here) and by qos.apply,
    # which a read-only check never runs: partial, not pass (one verdict function).
    assert data["gates"]["T00"] == "fail" and data["gates"]["T10"] == "partial"
    gpu = [f for r in data["results"] for f in r["findings"] if f["check"] == "T00.gpu-count"]
    assert gpu[0]["severity"] == "fail" and "only 7 of 8" in gpu[0]["message"]
    assert gpu[0]["evidence"][0]["command"] == "lspci -nn"
    assert "3D controller" in gpu[0]["evidence"][0]["excerpt"]


def test_check_on_an_unreachable_host_exits_2_naming_it(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        "name: gone\nssh: {connect_timeout: 2, known_hosts: kh, config: none}\n"
        "cluster: {kubeconfig: nope}\nnodes:\n  - name: gpu-1\n    host: 127.0.0.1\n"
        "    ssh: {port: 1}\n    bond: {ports: [p0, p1]}\n    rdma_ip: 192.168.50.1\n"
    )
    result = run_cli("check", str(site), "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 2
    assert "cannot reach root@127.0.0.1:1" in result.stdout
    assert "Traceback" not in result.stderr


def test_run_headless_stops_at_the_first_decision_then_applies_with_yes(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    state = str(tmp_path / "state")

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "run", str(site), "--headless", "--state-dir", state, "--phase", "irdma", *extra
        )

    with served_lab(site, "irdma-not-loaded"):
        first = run()
        assert first.returncode == 1
        assert (
            "stopped at step irdma.enable on gpu-b300-01: confirm-apply needs an answer"
            in first.stderr
        )
        assert "--yes" in first.stderr
        second = run("--yes")
        assert second.returncode == 0, second.stdout + second.stderr
        assert "irdma.verify: done" in second.stdout
        third = run("--yes")  # idempotent: nothing left to change
        assert "irdma.enable: done - already done (checkpoint)" in third.stdout


async def test_unreachable_cluster_is_a_connection_error(tmp_path):
    async with Lab(tmp_path / "lab") as lab:
        (lab.directory / "kubeconfig").write_text(
            "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: 'http://127.0.0.1:9'}}]\n"
            "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: x, user: u}}]\n"
            "current-context: c\n"
        )
        site = load_site(lab.site_path)
        outcome = await run_checks(
            site, build_plan(), tmp_path / "state", HeadlessFrontEnd(out=io.StringIO())
        )
    api = by_check(outcome)["T00.reachable"][0][1]
    assert "cannot reach the API server http://127.0.0.1:9" in api.message
    assert outcome.exit_code == 2


async def test_packages_step_installs_only_what_is_missing(tmp_path):
    from tests.conftest import findings_of, run_in_lab

    def remove_perftest(lab: Lab) -> None:
        lab.hosts["gpu-b300-01"].state.packages.discard("perftest")

    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    outcome, lab = await run_in_lab(
        tmp_path, frontend, phases=("packages",), prepare=remove_perftest
    )
    host = lab.hosts["gpu-b300-01"]
    assert "perftest" in host.state.packages
    installs = [c for c in host.commands if c.startswith("dnf install")]
    assert installs == ["dnf install -y perftest"]
    assert findings_of(outcome, "packages.install")["T02.packages"].severity is Severity.PASS


async def test_the_far_end_without_lossless_qos_fails_t08_with_its_remedy(tmp_path):
    for faults, severity in (((), Severity.PASS), (("peer-qos-missing",), Severity.FAIL)):
        outcome = await check_peer(tmp_path / f"peer{len(faults)}", *faults)
        [finding] = [f for _, _, f in outcome.findings if f.check == "T08.peer-qos-aistor-01"]
        assert finding.severity is severity, finding
        if severity is Severity.FAIL:
            assert (
                "DSCP 24 -> nothing" in finding.message and "PFC on no priority" in finding.message
            )
            assert "mlnx_qos -i" in finding.remediation


async def check_peer(tmp_path, *faults):
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from steps import build_plan
    from wizard.site import load_site

    async with Lab(tmp_path / "lab", faults=faults) as lab:
        return await run_engine(load_site(lab.site_path), build_plan(), tmp_path / "state",
                                HeadlessFrontEnd(out=io.StringIO()), only=["qos.peers"],
                                ignore_requires=True)  # fmt: skip
