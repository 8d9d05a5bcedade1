"""The GPUDirect proof reads the GPU through the driver where the GPU Operator puts it."""

from __future__ import annotations

import io
import shlex

from tests.conftest import K8S_PHASES, findings_of, run_in_lab
from wizard.driver_root import DRIVER_ROOT, nvidia_smi_command
from wizard.headless import HeadlessFrontEnd
from wizard.lab.host import LabHost
from wizard.model import Severity


def gpu_host(driver: bool) -> LabHost:
    host = LabHost(name="gpu-1", role="gpu", mgmt_ip="10.0.0.1", rdma_ip="192.168.50.1")
    host.gpu_driver = driver
    return host


def test_the_operator_driver_has_no_nvidia_smi_on_the_host_path():
    host = gpu_host(driver=True)
    assert host.execute("nvidia-smi -L").exit_status == 127
    listed = host.execute(shlex.join(nvidia_smi_command("-L")))
    assert listed.exit_status == 0 and listed.stdout.count("NVIDIA B300") == host.gpu_count


def test_without_a_driver_the_command_says_so():
    result = gpu_host(driver=False).execute(shlex.join(nvidia_smi_command("-L")))
    assert result.exit_status == 127 and "nvidia-smi: command not found" in result.stderr


def test_the_command_chroots_into_the_driver_root_when_it_holds_nvidia_smi(tmp_path):
    """The script itself, under a real /bin/sh: a fake driver root with nvidia-smi."""
    import subprocess

    root = tmp_path / "driver"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-smi").chmod(0o755)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "chroot").write_text('#!/bin/sh\necho "chroot $*"\n')
    (stubs / "nvidia-smi").write_text('#!/bin/sh\necho "host nvidia-smi $*"\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin"}
    into_root = subprocess.run(
        nvidia_smi_command("topo", "-m", root=str(root)), env=env, capture_output=True, text=True
    )
    assert into_root.stdout.strip() == f"chroot {root} nvidia-smi topo -m"
    on_host = subprocess.run(
        nvidia_smi_command("-L", root=str(tmp_path / "none")),
        env=env,
        capture_output=True,
        text=True,
    )
    assert on_host.stdout.strip() == "host nvidia-smi -L"
    assert DRIVER_ROOT == "/run/nvidia/driver"


async def test_readiness_reads_the_topology_through_the_driver_root(tmp_path):
    outcome, _ = await run_in_lab(
        tmp_path,
        HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO()),
        phases=(*K8S_PHASES, "gpudirect"),
    )
    topology = findings_of(outcome, "gpudirect.readiness")["T11.topology"]
    assert topology.severity in (Severity.PASS, Severity.WARN), topology.message
    assert "GPU0: PXB" in topology.message
