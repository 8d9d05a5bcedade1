"""The host scripts the wizard exports and installs, judged by real tools and a real shell.

- Every exported script of several site variants passes `sh -n` and `shellcheck`, and
  nothing executable (script, unit, manifest, playbook file) keeps a `<placeholder>`.
- The scripts run in the real /bin/sh of a lab host (simulator/shell.py), whose commands
  the driver model answers: the boot scripts and the exported apply and rollback scripts
  converge, and running them twice gives the same result; the old plain boot script does
  not survive a second run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from simulator.host import LabHost
from simulator.shell import LabShell
from steps import build_plan
from steps.qos import (
    BootPersistence,
    boot_dcb_script,
    boot_tos_script,
    desired_port,
    procedure,
    rollback_script,
)
from tests.conftest import MINIMAL_SITE, with_nodes
from wizard.export import export
from wizard.site import load_site, parse_site

VARIANTS = {
    "rhel": MINIMAL_SITE,
    "ubuntu": MINIMAL_SITE.replace("    rdma_ip: 192.168.50.1\n", "    rdma_ip: 192.168.50.1\n    os: ubuntu-24.04\n"),
    "two-nodes": with_nodes(2),
    "taint-mirror-ecn": MINIMAL_SITE
    + "taint: {enabled: true}\nregistry: {mirror: nexus.example.com:8443}\nqos: {ecn: true}\n",
}  # fmt: skip
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9 -]*>")


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def exported(request, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp(request.param)
    (tmp / "site.yaml").write_text(VARIANTS[request.param])
    export(load_site(tmp / "site.yaml"), build_plan(), tmp / "out")
    return tmp / "out"


def _scripts(out: Path) -> list[Path]:
    return [
        p for p in sorted(out.rglob("*"))
        if p.is_file() and p.suffix != ".md" and p.read_text().startswith("#!/bin/sh")
    ]  # fmt: skip


def test_every_exported_script_parses_and_passes_shellcheck(exported):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is missing: .ci/run installs it")
        pytest.skip("shellcheck not installed")
    scripts = _scripts(exported)
    assert len(scripts) >= 5, scripts  # apply, rollback, the two boot scripts, the copy-images
    for script in scripts:
        parsed = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert parsed.returncode == 0, (script, parsed.stderr)
        checked = subprocess.run([shellcheck, "-S", "style", "-s", "sh", str(script)],
                                 capture_output=True, text=True)  # fmt: skip
        assert checked.returncode == 0, (script, checked.stdout)


def test_nothing_executable_keeps_a_placeholder(exported):
    for path in sorted(exported.rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".txt") or path.name == "MANIFEST.json":
            continue
        found = PLACEHOLDER.findall(path.read_text())
        assert not found, (path.relative_to(exported), found)


# -- in a real shell on a lab host ------------------------------------------------------------


@pytest.fixture
async def lab_host(request):
    os_name = getattr(request, "param", "rhel-10.2")
    host = LabHost("gpu-b300-01", "gpu", "10.10.0.21", "192.168.50.21", os=os_name)
    shell = LabShell({host.name: host})
    await shell.start()
    try:
        yield shell, host
    finally:
        await shell.stop()


def _site(os_name: str):
    site = MINIMAL_SITE.replace("gpu-1", "gpu-b300-01")
    if os_name.startswith("ubuntu"):
        site = site.replace(
            "    rdma_ip: 192.168.50.1\n", "    rdma_ip: 192.168.50.1\n    os: ubuntu-24.04\n"
        )
    return parse_site(site)


def _qos(host: LabHost):
    return [(p.lldp_agent, sorted(p.pfc), list(p.app), p.dcb.tc_bw) for p in host.ports]


WANTED = [(False, [3], [(24, 3)], [50, 0, 0, 50, 0, 0, 0, 0])] * 2
TOS = "/sys/kernel/config/rdma_cm/irdma0/ports/1/default_roce_tos"
DCQCN = "/sys/kernel/config/irdma/irdma0/roce_dcqcn_enable"


async def test_boot_scripts_run_twice_with_the_same_result(lab_host):
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    host.reboot()  # the ports are not in the bond yet: the early unit's moment
    for _ in range(2):
        result = await shell.run(host, boot_dcb_script(site, node))
        assert result.exit_status == 0, result.stderr
        assert _qos(host) == WANTED
    host.network.form_bond()  # the network comes up; Intel's LAG registers the RDMA device again
    assert host.rdma_devices, host.state.kernel_log
    for _ in range(2):
        result = await shell.run(host, boot_tos_script(site, node))
        assert result.exit_status == 0, result.stderr
        assert host.configfs[TOS] == "96\n"


async def test_the_old_plain_boot_script_fails_on_its_second_run(lab_host):
    shell, host = lab_host
    host.reboot()
    old = "#!/bin/sh\nset -eu\n" + "".join(
        f"ethtool --set-priv-flags {p} fw-lldp-agent off\ndcb app add dev {p} dscp-prio 24:3\n"
        for p in ("ens5f0np0", "ens5f1np1")
    )
    assert (await shell.run(host, old)).exit_status == 0
    second = await shell.run(host, old)
    assert second.exit_status == 1 and "File exists" in second.stderr


@pytest.mark.parametrize("lab_host", ["rhel-10.2", "ubuntu-24.04"], indirect=True)
async def test_exported_apply_and_rollback_converge_through_the_bonds_manager(lab_host):
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    for _ in range(2):  # a second run finds everything in place and changes nothing
        result = await shell.run(host, procedure(site, node))
        assert result.exit_status == 0, result.stderr
        assert _qos(host) == WANTED
        assert all(p.enslaved and p.admin_up for p in host.ports)
        assert host.configfs[TOS] == "96\n"
    manager = "NetworkManager" if host.state.os.startswith("rhel") else "networkd"
    assert f"{node.bond.name} is managed by: {manager}" in result.stderr
    assert not any("released from controller" in line for line in host.state.kernel_log)
    for _ in range(2):
        result = await shell.run(host, rollback_script(site, node, None))
        assert result.exit_status == 0, result.stderr
        assert [(p.lldp_agent, sorted(p.pfc), list(p.app)) for p in host.ports] == [
            (True, [], [])
        ] * 2
        assert all(p.enslaved for p in host.ports) and host.configfs[TOS] == "0\n"


def _install_boot_units(host, site, node) -> None:
    """The two boot units as qos.persist installs and enables them."""
    for artifact in BootPersistence().artifacts(site, node):
        host.files[artifact.host_path] = artifact.content
    host.state.enabled_units |= {
        "gpu-node-wizard-roce-qos.service",
        "gpu-node-wizard-roce-tos.service",
    }


async def test_a_reboot_runs_the_units_before_and_after_the_network(lab_host):
    """Installed as the wizard installs them, the two units bring the QoS and the ToS back
    after a reboot; with only the DCB unit (ToS written before the bond formed), the ToS of
    the re-registered device is lost."""
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    _install_boot_units(host, site, node)
    host.reboot()
    await shell.boot(host)
    assert [entry["exit"] for entry in host.state.boot_log] == [0, 0], host.state.boot_log
    assert _qos(host) == WANTED and host.configfs[TOS] == "96\n"
    # Without the late unit: the bond forms after the early one, the device starts at 0.
    host.state.enabled_units.discard("gpu-node-wizard-roce-tos.service")
    host.files[TOS.replace("/default_roce_tos", "")] = ""
    host.reboot()
    await shell.boot(host)
    assert host.configfs.get(TOS, "0\n") == "0\n"


async def test_a_failed_boot_dcb_unit_stops_the_tos_unit(lab_host):
    """host-r2 M5: the bond formed before the DCB unit ran (NetworkManager in the initrd),
    so Intel's LAG refuses its dcb sets (ice_dcb_nl.c: -EINVAL while pf->lag->bonded) and
    the unit fails. The ToS unit requires it: it is not started, so no RoCE ToS is
    written for ports left with ice's default DCB (one TC, no PFC), and both show."""
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    _install_boot_units(host, site, node)
    host.reboot()
    host.network.form_bond()  # bonded before the early unit
    await shell.boot(host)
    log = {entry["unit"]: entry for entry in host.state.boot_log}
    assert log["gpu-node-wizard-roce-qos.service"]["exit"] != 0
    assert log["gpu-node-wizard-roce-tos.service"].get("result") == "dependency"
    assert host.configfs.get(TOS, "0\n") == "0\n"


async def test_the_boot_tos_script_refuses_ports_whose_dcb_is_not_in_place(lab_host):
    """host-r2 M5: the ToS script checks the DCB of both ports (the change's own
    port_differs) before it marks RoCE traffic for a lossless class."""
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    assert (await shell.run(host, procedure(site, node))).exit_status == 0
    host.network.set_enslaved(host.ports[1], False)
    host.ports[1].dcb.pfc = set()  # PFC gone on the second port
    host.network.form_bond()
    host.configfs.pop(TOS, None)
    result = await shell.run(host, boot_tos_script(site, node))
    assert result.exit_status == 1 and "ens5f1np1" in result.stderr, result.stderr
    assert host.configfs.get(TOS, "0\n") == "0\n"


async def test_the_lab_shell_refuses_a_script_that_writes_files_behind_the_model(lab_host):
    shell, host = lab_host
    result = await shell.run(host, "#!/bin/sh\nprintf '%s\\n' 96 > /sys/kernel/config/x\n")
    assert result.exit_status == 126 and "tee" in result.stderr


def test_desired_port_reads_back_as_the_driver_reports_it():
    assert desired_port(_site("rhel-10.2")).tc_bw == (50, 0, 0, 50, 0, 0, 0, 0)


async def test_with_ecn_the_boot_units_bring_dcqcn_back_on_the_re_registered_device(lab_host):
    shell, host = lab_host
    site = parse_site(MINIMAL_SITE.replace("gpu-1", "gpu-b300-01") + "qos: {ecn: true}\n")
    node = site.nodes[0]
    _install_boot_units(host, site, node)
    host.configfs["/sys/kernel/config/irdma/irdma0/"] = ""
    host.configfs[DCQCN] = "1\n"
    host.reboot()  # configfs is gone; the bond forms after the early unit
    await shell.boot(host)
    assert [entry["exit"] for entry in host.state.boot_log] == [0, 0], host.state.boot_log
    assert host.configfs[DCQCN] == "1\n" and host.configfs[TOS] == "96\n"
    # Writing it before the bond forms is not enough: the re-registered device drops it.
    host.network.form_bond()
    host.network.set_enslaved(host.ports[1], False)
    assert DCQCN not in host.configfs


async def test_the_exported_apply_finishes_a_half_done_change_under_network_manager(lab_host):
    """A first run broke off with both ports out of the bond (their NetworkManager profiles
    down): a rerun finds the profiles it kept, changes what is missing and rejoins."""
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    failing = procedure(site, node).replace('join_bond "$manager"\ndev=', "false\ndev=", 1)
    broken = await shell.run(host, failing.replace("trap rejoin_on_failure EXIT", ":", 1))
    assert broken.exit_status != 0 and not any(p.enslaved for p in host.ports)
    result = await shell.run(host, procedure(site, node))
    assert result.exit_status == 0, result.stderr
    assert all(p.enslaved for p in host.ports) and _qos(host) == WANTED


async def test_a_failure_after_leaving_the_bond_rejoins_it(lab_host):
    shell, host = lab_host
    site = _site(host.state.os)
    failing = procedure(site, site.nodes[0]).replace('join_bond "$manager"\ndev=', "false\ndev=", 1)
    result = await shell.run(host, failing)
    assert result.exit_status != 0 and "bond1 rejoined" in result.stderr
    assert all(p.enslaved for p in host.ports)


async def test_a_rollback_lasts_across_the_next_boot(lab_host):
    """#24 review host-r2 B2: after rollback-qos.sh the boot units (qos.persist) are
    disabled, so the next boot leaves the captured QoS alone (before, they stayed enabled
    and applied the rolled-back QoS again at the next boot)."""
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    before = _qos(host)
    assert (await shell.run(host, procedure(site, node))).exit_status == 0
    for artifact in BootPersistence().artifacts(site, node):
        host.files[artifact.host_path] = artifact.content
    units = ["gpu-node-wizard-roce-qos.service", "gpu-node-wizard-roce-tos.service"]
    host.state.enabled_units |= set(units)
    result = await shell.run(host, rollback_script(site, node, None))
    assert result.exit_status == 0, result.stderr
    enabled = await shell.run(host, "systemctl is-enabled " + " ".join(units))
    assert enabled.stdout.split() == ["disabled", "disabled"], enabled.stdout
    host.reboot()
    await shell.boot(host)
    host.network.form_bond()
    assert _qos(host) == before


@pytest.mark.parametrize("stop", ["false", "kill -HUP $$"])
@pytest.mark.parametrize("script", ["apply", "rollback"])
async def test_a_failure_after_leaving_the_bond_rejoins_it_with_the_terminal_gone(
    lab_host, script, stop
):
    """#24 review host-r2 B1: when the session is gone its stderr fails (EIO on a hung-up
    tty, EPIPE on a closed channel), and the first `log` of
    the EXIT trap used to end the script under `set -e` before it re-formed the bond. The
    lab's shell refuses a redirection into a file, so stderr is closed instead (a write
    to it fails, EBADF, as to a hung-up tty)."""
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    if script == "rollback":
        assert (await shell.run(host, procedure(site, node))).exit_status == 0
        text = rollback_script(site, node, None)
    else:
        text = procedure(site, node)
    # Out of the bond, the session goes (stderr closed), then the script stops.
    failing = text.replace('join_bond "$manager"\ndev=', f"exec 2>&-\n{stop}\ndev=", 1)
    assert failing.count(f"exec 2>&-\n{stop}\ndev=") == 1
    result = await shell.run(host, failing)
    assert result.exit_status != 0
    assert any("Releasing" in line for line in host.state.kernel_log), host.state.kernel_log
    assert all(p.enslaved and p.admin_up for p in host.ports)


async def test_the_exported_apply_addresses_the_port_profiles_by_uuid(lab_host):
    """#24 point 4 (review host-r2 M3): an old standalone ethernet profile of the same name
    beside each port's bond profile, listed first (the lab's nmcli resolves names as nmcli
    does: simulator/network.py nm_connections). `nmcli connection up NAME` would bring the
    port up outside the bond; by UUID the bond re-forms with the ports' own profiles."""
    shell, host = lab_host
    host.faults.add("nm-duplicate-profile")
    site = _site(host.state.os)
    result = await shell.run(host, procedure(site, site.nodes[0]))
    assert result.exit_status == 0, result.stderr
    assert all(p.enslaved and p.admin_up and not p.nm_standalone for p in host.ports)
    assert _qos(host) == WANTED


async def test_the_boot_tos_unit_refuses_ports_without_their_dcb(lab_host):
    """#24 review host-r2 M5: when the early DCB unit failed, the ToS unit fails too (its
    script checks both ports' DCB first; the unit Requires= the DCB unit) instead of
    writing the ToS on ports with no PFC and no DSCP map."""
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    host.reboot()
    host.network.form_bond()  # the bond formed, but no DCB unit ran
    result = await shell.run(host, boot_tos_script(site, node))
    assert result.exit_status != 0 and "DCB is not in place" in result.stderr, result.stderr
    assert host.configfs.get(TOS, "0\n") == "0\n"
    assert (
        "Requires=gpu-node-wizard-roce-qos.service"
        in BootPersistence().artifacts(site, node)[3].content
    )
