"""Host RDMA beyond irdma itself (issue #14): the user-space device modules the RDMA device
plugin needs, and the initramfs that loads irdma at boot with the options it was built with."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from simulator.host import LabHost
from tests.conftest import run_in_lab
from wizard.model import Severity

PHASES = ("preflight", "packages", "e810", "bond", "irdma")


def test_without_ib_umad_the_plugin_sees_no_umad_device():
    """rdma-core loads ib_uverbs and rdma_ucm on a RoCE host, never ib_umad."""
    host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1")
    host.state.modules.discard("ib_umad")
    assert host.execute("ls /dev/infiniband").stdout.split() == ["rdma_cm", "uverbs0"]
    host.execute("modprobe -a ib_umad")
    assert "umad0" in host.execute("ls /dev/infiniband").stdout.split()


def test_a_modprobe_option_without_a_rebuilt_initramfs_boots_irdma_in_iwarp_mode():
    host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1", faults={"iwarp"})
    host.files["/etc/modprobe.d/irdma.conf"] = "options irdma roce_ena=1\n"
    host.execute("modprobe -r irdma")
    host.execute("modprobe irdma")
    assert host.state.roce  # loaded now with the new option
    host.reboot()
    assert not host.state.roce  # the initramfs still has the old (no) option
    host.execute("dracut -f")
    host.reboot()
    assert host.state.roce


async def test_irdma_enable_loads_the_device_modules_and_rebuilds_the_initramfs(tmp_path):
    def prepare(lab):
        host = lab.hosts["gpu-b300-01"]
        host.state.modules.discard("ib_umad")
        host.files["/etc/modules-load.d/irdma.conf"] = "irdma\n"  # an older file, no ib_umad

    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, "iwarp", phases=PHASES, prepare=prepare)
    failed = [(f.check, f.message) for _, _, f in outcome.findings if f.severity is Severity.FAIL]
    assert outcome.exit_code == 0, failed
    host = lab.hosts["gpu-b300-01"]
    assert {"ib_umad", "rdma_ucm", "ib_uverbs", "irdma"} <= host.state.modules
    assert "ib_umad" in host.files["/etc/modules-load.d/irdma.conf"]
    assert host.commands.index("dracut -f") > host.commands.index("modprobe irdma")
    host.reboot()  # irdma from the rebuilt initramfs, the rest from modules-load.d
    assert host.state.roce and "ib_umad" in host.state.modules
    checks = {f.check: f for _, _, f in outcome.findings}
    assert checks["T02.devices"].severity is Severity.PASS
    assert checks["T02.initramfs"].severity is Severity.PASS
