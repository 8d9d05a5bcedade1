"""Dry-run export: complete, deterministic, offline, safe with existing folders, redacted."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from frontend.cli import main
from steps import build_plan
from tests.conftest import MINIMAL_SITE, REFS, fleet_site, leaf_paths, run_cli
from wizard.export import MANIFEST, RUNBOOK, export
from wizard.site import load_site


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_export_writes_artifacts_runbook_and_a_true_manifest(site_file, tmp_path):
    out = tmp_path / "out"
    checksums = export(load_site(site_file), build_plan(), out)
    files = tree(out)
    assert RUNBOOK in files and MANIFEST in files
    assert "nodes/gpu-1/host/etc/modules-load.d/irdma.conf" in files
    assert "nodes/gpu-1/host/etc/modprobe.d/irdma.conf" in files
    assert "cluster/kubespray/hosts-fragment.yaml" in files
    assert "cluster/helm/gpu-operator-values.yaml" in files
    manifest = json.loads(files[MANIFEST])
    assert set(manifest["files"]) == set(files) - {MANIFEST}
    for path, entry in manifest["files"].items():
        assert hashlib.sha256(files[path]).hexdigest() == entry["sha256"] == checksums[path]


def test_export_is_byte_identical_across_runs(site_file, tmp_path):
    site = load_site(site_file)
    export(site, build_plan(), tmp_path / "a")
    export(site, build_plan(), tmp_path / "b")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


def test_runbook_lists_every_phase_step_and_node_command(site_file, tmp_path):
    export(load_site(site_file), build_plan(), tmp_path / "out")
    runbook = (tmp_path / "out" / RUNBOOK).read_text()
    for phase in build_plan().phases:
        assert f"## Phase {phase.number}: {phase.title}" in runbook
        for step in phase.steps:
            assert f"### {step.id}: {step.title}" in runbook
    assert "cat /proc/net/bonding/bond1" in runbook
    assert "ethtool -i ens5f0np0" in runbook and "ethtool -i ens5f1np1" in runbook
    assert "dcb app add dev ens5f0np0 dscp-prio 24:3" in runbook
    assert (
        "dcb pfc set dev ens5f1np1 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"
        in runbook
    )
    assert (
        "printf '%s\\n' 96 > /sys/kernel/config/rdma_cm/<rdma-dev>/ports/1/default_roce_tos"
        in runbook
    )
    assert "ip link set dev ens5f0np0 nomaster" in runbook
    assert "scale.yml --limit=gpu-1" in runbook


def test_commands_quote_hostile_values(tmp_path):
    text = MINIMAL_SITE + 'cluster: {context: "prod;rm"}\n'
    path = tmp_path / "site.yaml"
    path.write_text(text)
    export(load_site(path), build_plan(), tmp_path / "out")
    runbook = (tmp_path / "out" / RUNBOOK).read_text()
    assert "--kube-context 'prod;rm'" in runbook
    assert "--kube-context prod;rm" not in runbook


def test_generated_yaml_and_inventory_are_valid(site_file, tmp_path):
    export(load_site(site_file), build_plan(), tmp_path / "out")
    hosts = yaml.safe_load((tmp_path / "out/cluster/kubespray/hosts-fragment.yaml").read_text())
    assert hosts["all"]["hosts"]["gpu-1"] == {"ansible_host": "10.0.0.1", "ip": "192.168.50.1"}
    assert "gpu-1" in hosts["all"]["children"]["kube_node"]["hosts"]
    ini = (tmp_path / "out/cluster/kubespray/inventory-fragment.ini").read_text()
    assert "gpu-1 ansible_host=10.0.0.1 ip=192.168.50.1" in ini and "[kube_node]\ngpu-1" in ini


def test_gpu_operator_values_only_use_keys_of_the_pinned_chart(site_file, tmp_path):
    reference = REFS / "gpu-operator-values-v26.7.0.yaml"
    if not reference.exists():
        pytest.skip("../shared/refs not available")
    chart = yaml.safe_load(reference.read_text())
    export(load_site(site_file), build_plan(), tmp_path / "out")
    values = yaml.safe_load((tmp_path / "out/cluster/helm/gpu-operator-values.yaml").read_text())
    assert "kernelModuleType" not in values["driver"]  # the chart's auto, on every GPU node
    assert values["driver"]["rdma"]["enabled"] is False
    for key in leaf_paths(values):
        node = chart
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{key} is not in the v26.7.0 chart"
            node = node[part]


def test_refuses_a_non_empty_folder_and_force_replaces_only_an_export(site_file, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(site_file), "--out", str(out)]) == 2
    assert main(["export", str(site_file), "--out", str(out), "--force"]) == 2  # not an export
    assert (out / "notes.txt").read_text() == "mine"
    fresh = tmp_path / "fresh"
    assert main(["export", str(site_file), "--out", str(fresh)]) == 0
    stale = fresh / "nodes/gpu-1/host/etc/modprobe.d/irdma.conf"
    site_file.write_text(site_file.read_text().replace("name: gpu-1", "name: gpu-7"))
    assert main(["export", str(site_file), "--out", str(fresh), "--force"]) == 0
    assert not stale.exists()
    assert (fresh / "nodes/gpu-7/host/etc/modprobe.d/irdma.conf").exists()


def test_export_opens_no_socket(site_file, tmp_path, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("export tried to open a socket")

    monkeypatch.setattr(socket, "socket", forbidden)
    monkeypatch.setattr(socket, "create_connection", forbidden)
    monkeypatch.setattr(socket, "getaddrinfo", forbidden)
    assert main(["export", str(site_file), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / RUNBOOK).exists()


def test_planted_secret_never_reaches_an_exported_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_USER", "svc-gpu-wizard-user")
    monkeypatch.setenv("NEXUS_PASSWORD", "Planted-Secret-9f3a")
    path = tmp_path / "site.yaml"
    path.write_text(
        MINIMAL_SITE
        + "registry: {mirror: nexus.lab:8443/nvidia, username_env: NEXUS_USER, password_env: NEXUS_PASSWORD}\n"
    )
    out = tmp_path / "out"
    assert main(["export", str(path), "--out", str(out)]) == 0
    for rel, content in tree(out).items():
        assert b"Planted-Secret-9f3a" not in content, rel


def test_cli_init_export_status_as_a_new_user_would(tmp_path):
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, cwd=tmp_path)

    assert cli("init").returncode == 0
    assert cli("init").returncode == 2  # will not overwrite
    assert (tmp_path / "site.yaml").exists()
    result = cli("export", "site.yaml", "--out", "export")
    assert result.returncode == 0, result.stderr
    assert "RUNBOOK.md" in result.stdout
    status = cli("status", "site.yaml", "--state-dir", "state")
    assert status.returncode == 0 and "no checkpoint yet" in status.stdout
    help_text = cli("--help").stdout
    for command in ("init", "export", "status", "parse"):
        assert command in help_text


def test_status_shows_states_interruptions_and_site_changes(site_file, state_dir):
    from wizard.checkpoint import Checkpoint
    from wizard.model import StepState

    site = load_site(site_file)
    with Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.set_step("preflight.host", "gpu-1", StepState.DONE, message="ok")
        checkpoint.set_step("bond.lacp", "gpu-1", StepState.RUNNING)
    site_file.write_text(site_file.read_text().replace("ens5f1np1", "ens5f1np9"))
    result = run_cli("status", str(site_file), "--state-dir", str(state_dir))
    assert result.returncode == 0, result.stderr
    assert "done     preflight.host on gpu-1" in result.stdout
    assert "interrupted (re-verified first on resume): bond.lacp on gpu-1" in result.stdout
    assert "site file changed since the checkpoint: nodes.gpu-1.bond" in result.stdout
    assert "the next run resets: bond.lacp on gpu-1" in result.stdout
    as_json = run_cli("status", str(site_file), "--state-dir", str(state_dir), "--json")
    data = json.loads(as_json.stdout)
    assert {"step": "bond.lacp", "target": "gpu-1"} in data["would_reset"]


def test_status_groups_a_fleets_nodes_by_outcome(tmp_path, state_dir):
    from wizard.checkpoint import Checkpoint
    from wizard.model import StepState

    site_file = tmp_path / "fleet.yaml"
    site_file.write_text(fleet_site(8))
    site = load_site(site_file)
    with Checkpoint.open(state_dir, site) as checkpoint:
        for node in site.nodes:
            failed = node.name == "gpu-05"
            checkpoint.set_step(
                "preflight.gpus", node.name, StepState.FAILED if failed else StepState.DONE,
                message="7 of 8 GPUs" if failed else "",
            )  # fmt: skip
    result = run_cli("status", str(site_file), "--state-dir", str(state_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  done     preflight.gpus on 7 nodes (gpu-01 ... gpu-08)" in lines
    assert "  failed   preflight.gpus on gpu-05 - 7 of 8 GPUs" in lines
    assert "  pending  packages.install on 8 nodes (gpu-01 ... gpu-08)" in lines


def test_output_into_a_closed_pipe_is_not_a_traceback():
    """`gpu-node-wizard ... | head`: the reader leaves early; no traceback, exit 141."""
    import os
    import sys

    from tests.conftest import REPO

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "frontend.cli", "parse", "--list"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=REPO, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert result.returncode == 141
    assert result.stderr == ""
