"""containerd keeps the nvidia runtime the GPU Operator's toolkit set up, after Kubespray
runs: the check reads config.toml and the toolkit's drop-in, and names a lost imports line."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from steps.gpu_operator.runtime import evaluate_runtime
from tests.conftest import K8S_PHASES, findings_of, run_in_lab
from wizard.model import Severity
from wizard.probe import Report

CONFIG = "/etc/containerd/config.toml"
KUBESPRAY = (
    'version = 3\nroot = "/var/lib/containerd"\n\n[grpc]\n  max_recv_message_size = 16777216\n'
)
DROP_IN = (
    'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
    '  runtime_type = "io.containerd.runc.v2"\n'
)


def judge(config: str | None, drop_in: str | None, path: str = CONFIG):
    report = Report("T01")
    evaluate_runtime("gpu-1", path, config, drop_in, report, "gpu-operator")
    (finding,) = report.findings
    return finding


def test_the_drop_in_counts_only_while_config_toml_imports_it():
    imported = judge('imports = ["/etc/containerd/conf.d/*.toml"]\n' + KUBESPRAY, DROP_IN)
    assert imported.severity is Severity.PASS and "99-nvidia.toml" in imported.message
    lost = judge(KUBESPRAY, DROP_IN)
    assert lost.severity is Severity.FAIL and "no longer imports" in lost.message
    assert "group_vars/all/containerd.yml" in lost.remediation
    assert "spec.nodeName=gpu-1" in lost.remediation
    other_dir = judge('imports = ["/etc/containerd/extra/*.toml"]\n' + KUBESPRAY, DROP_IN)
    assert other_dir.severity is Severity.FAIL


def test_relative_imports_resolve_from_the_config_folder():
    relative = judge('imports = ["conf.d/*.toml"]\n' + KUBESPRAY, DROP_IN)
    assert relative.severity is Severity.PASS


def test_a_runtime_in_config_toml_itself_or_a_v2_config_is_enough():
    v2 = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
    assert judge(v2, None).severity is Severity.PASS


def test_missing_or_broken_files_are_named_not_raised():
    assert "does not exist" in judge(None, DROP_IN).message
    assert "not valid TOML" in judge("imports = [\n", DROP_IN).message
    none = judge(KUBESPRAY, None)
    assert none.severity is Severity.FAIL and "no nvidia runtime" in none.message
    assert judge(KUBESPRAY, "not = [toml").severity is Severity.FAIL


async def test_the_lab_after_a_kubespray_run_that_dropped_the_imports_line(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    outcome, _ = await run_in_lab(
        tmp_path, frontend, "containerd-imports-dropped", phases=K8S_PHASES
    )
    finding = findings_of(outcome, "gpu-operator.verify")["T01.nvidia-runtime"]
    assert finding.severity is Severity.FAIL
    assert "no longer imports /etc/containerd/conf.d/99-nvidia.toml" in finding.message
