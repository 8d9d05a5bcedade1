"""Kernel updates: the packages step installs the running kernel's own headers, and Intel's
out-of-tree ice/irdma are checked for every installed kernel, so that a `dnf update` whose
new kernel has only the in-tree ice is caught before the reboot that would boot it (T17)."""

from __future__ import annotations

import io
import subprocess

from frontend.headless import HeadlessFrontEnd
from simulator.host.model import RHEL_KERNEL, RHEL_NEXT_KERNEL
from steps.kernel_modules import installed_kernels, next_boot
from steps.packages import (
    HostPackages,
    headers_metapackages,
    install_command,
    node_packages,
    query_line,
)
from tests.conftest import MINIMAL_SITE, findings_of, run_in_lab
from tests.test_lab_checks import by_check, check_lab
from wizard.model import Severity, StepState
from wizard.site import parse_site

SITE = parse_site(MINIMAL_SITE)


def test_the_headers_are_the_running_kernels_by_name():
    assert "kernel-devel-6.1.0-9-x" in node_packages("rhel-10.2", "6.1.0-9-x")
    assert "linux-headers-6.8.0-86-generic" in node_packages("ubuntu-24.04", "6.8.0-86-generic")
    for profile in ("rhel-10.2", "ubuntu-24.04"):
        names = node_packages(profile, "6.1.0")
        assert "kernel-devel" not in names and "linux-headers-generic" not in names


def test_the_runbook_lines_name_the_running_kernel_under_a_real_shell(tmp_path):
    """The exported query and install lines, run by sh with stand-ins for uname, rpm and
    dnf: the shell expands $(uname -r) inside the package name, nothing else unquoted."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool, body in (("uname", 'echo "6.12.0-7.el10.x86_64"'), ("rpm", 'echo "rpm $*"'),
                       ("dnf", 'echo "dnf $*"')):  # fmt: skip
        (stubs / tool).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / tool).chmod(0o755)
    lines = HostPackages().commands(SITE, SITE.nodes[0])[1:]
    assert lines == [query_line("rhel-10.2"), install_command("rhel-10.2")]
    for line in lines:
        ran = subprocess.run(["sh", "-c", line], capture_output=True, text=True,
                             env={"PATH": f"{stubs}:/usr/bin:/bin"})  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert " kernel-devel-6.12.0-7.el10.x86_64" in ran.stdout, ran.stdout
        assert "uname" not in ran.stdout


async def test_headers_of_another_kernel_do_not_count(tmp_path):
    """The node has a newer kernel's kernel-devel: an unversioned name would be satisfied;
    the running kernel's headers are installed."""
    outcome, lab = await run_in_lab(
        tmp_path, HeadlessFrontEnd(yes=True, out=io.StringIO()), "headers-other-kernel",
        phases=("packages",),
    )  # fmt: skip
    host = lab.hosts["gpu-b300-01"]
    assert f"dnf install -y kernel-devel-{RHEL_KERNEL}" in host.commands
    assert f"kernel-devel-{RHEL_KERNEL}" in host.state.packages
    assert findings_of(outcome, "packages.install")["T02.packages"].severity is Severity.PASS


def test_the_next_boot_is_grubbys_default_else_the_newest():
    kernels = ["6.8.0-86-generic", "6.8.0-100-generic", "6.8.0-90-generic"]
    assert next_boot(kernels, None) == "6.8.0-100-generic"
    assert next_boot(kernels, "/boot/vmlinuz-6.8.0-86-generic\n") == "6.8.0-86-generic"


async def test_a_clean_node_has_intels_drivers_for_its_kernel(tmp_path):
    outcome = await check_lab(tmp_path)
    finding = by_check(outcome)["T17.kernel-update"][0][1]
    assert finding.severity is Severity.PASS and RHEL_KERNEL in finding.message


async def test_a_kernel_update_with_only_the_in_tree_ice_is_caught_early(tmp_path):
    outcome = await check_lab(tmp_path, "kernel-update")
    finding = by_check(outcome)["T17.kernel-update"][0][1]
    assert finding.severity is Severity.WARN
    assert f"the next boot starts {RHEL_NEXT_KERNEL}" in finding.message
    assert "in-tree" in finding.message and "grubby --set-default" in finding.remediation


async def test_weak_modules_links_carry_the_drivers_into_the_new_kernel(tmp_path):
    outcome = await check_lab(tmp_path, "kernel-update-weak-modules")
    finding = by_check(outcome)["T17.kernel-update"][0][1]
    assert finding.severity is Severity.PASS, finding.message
    assert RHEL_NEXT_KERNEL in finding.message and "kernel-modules" not in {
        f.check.split(".", 1)[1] for _, _, f in outcome.findings if f.severity is Severity.WARN
    }


async def _operate(tmp_path, fault):
    booted: dict[str, str] = {}

    def remember(lab):
        booted["before"] = lab.hosts["gpu-b300-01"].state.boot_id

    outcome, lab = await run_in_lab(
        tmp_path,
        HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO()),
        "greenfield",
        fault,
        phases=("operate",),
        prepare=remember,
    )  # fmt: skip  (greenfield: only this phase runs, so the node must be in the cluster)
    return outcome, lab.hosts["gpu-b300-01"].state.boot_id != booted["before"]


async def test_the_reboot_is_refused_while_the_next_kernel_lacks_the_drivers(tmp_path):
    """T17's kernel-update scenario: right before the reboot the check runs again (the
    reboot's precondition), fails, and the node is not rebooted into a kernel whose in-tree
    ice would drop RDMA from bond1."""
    outcome, rebooted = await _operate(tmp_path, "kernel-update")
    before = findings_of(outcome, "operate.reboot")["T17.kernel-update"]
    assert before.severity is Severity.FAIL and RHEL_NEXT_KERNEL in before.message
    assert outcome.summary.results[("operate.reboot", "gpu-b300-01")] is StepState.FAILED
    assert not rebooted


async def test_with_the_drivers_in_place_the_reboot_goes_ahead(tmp_path):
    outcome, rebooted = await _operate(tmp_path, "kernel-update-weak-modules")
    assert outcome.summary.results[("operate.reboot", "gpu-b300-01")] is StepState.DONE
    assert rebooted


def test_ubuntu_keeps_the_headers_metapackage_of_its_kernel_track():
    """linux-headers-$(uname -r) is one kernel's; without the flavour metapackage matching
    the installed linux-image-* metapackage, `apt upgrade` brings a kernel with no headers
    and DKMS builds nothing for it."""
    kernel = "6.11.0-19-generic"
    hwe = ["linux-image-6.11.0-19-generic", "linux-image-generic-hwe-24.04",
           "linux-image-unsigned-6.11.0-19-generic"]  # fmt: skip
    assert headers_metapackages(hwe, kernel) == ["linux-headers-generic-hwe-24.04"]
    assert headers_metapackages(["linux-image-generic"], kernel) == ["linux-headers-generic"]
    # No image metapackage at all: the running kernel's flavour.
    assert headers_metapackages([], "6.8.0-86-lowlatency") == ["linux-headers-lowlatency"]
    names = node_packages("ubuntu-24.04", kernel, images=hwe)
    assert {"linux-headers-6.11.0-19-generic", "linux-headers-generic-hwe-24.04"} <= set(names)
    assert not any(n.startswith("kernel-devel") for n in names)
    assert "linux-headers-generic-hwe-24.04" not in node_packages("rhel-10.2", kernel, images=hwe)


def test_the_ubuntu_runbook_line_installs_the_metapackage_under_a_real_shell(tmp_path):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    listing = ("ii  linux-image-6.11.0-19-generic\\nii  linux-image-generic-hwe-24.04\\n"
               "rc  linux-image-6.8.0-40-generic\\nii  linux-image-unsigned-6.11.0-19-generic\\n")  # fmt: skip
    for tool, body in (("uname", 'echo "6.11.0-19-generic"'), ("apt-get", 'echo "apt-get $*"'),
                       ("dpkg-query", f'printf "{listing}"')):  # fmt: skip
        (stubs / tool).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / tool).chmod(0o755)
    ran = subprocess.run(["sh", "-c", install_command("ubuntu-24.04")], capture_output=True,
                         text=True, env={"PATH": f"{stubs}:/usr/bin:/bin"})  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    words = ran.stdout.split()
    assert "linux-headers-6.11.0-19-generic" in words and "linux-headers-generic-hwe-24.04" in words
    assert not any(w.startswith("linux-headers-6.8") or "unsigned" in w for w in words), words


def test_the_installed_kernels_are_the_images_in_boot():
    listing = ("config-6.12.0-124.8.1.el10_2.x86_64\ngrub2\nvmlinuz\nvmlinuz.old\n"
               "vmlinuz-0-rescue-0123456789abcdef\nvmlinuz-6.12.0-124.8.1.el10_2.x86_64\n"
               "vmlinuz-6.12.0-124.13.1.el10_2.x86_64\n")  # fmt: skip
    assert installed_kernels(listing) == [RHEL_KERNEL, RHEL_NEXT_KERNEL]
    assert installed_kernels("") == [] and installed_kernels("vmlinuz-$(x)\n") == []


async def test_a_leftover_module_tree_of_a_removed_kernel_is_not_a_kernel(tmp_path):
    """A removed kernel's /lib/modules tree (in-tree ice only) stays behind; it has no image
    in /boot, so it neither warns nor is taken for the next boot."""
    outcome, _ = await run_in_lab(
        tmp_path, HeadlessFrontEnd(yes=True, out=io.StringIO()), "leftover-module-tree",
        phases=("e810",),
    )  # fmt: skip
    found = findings_of(outcome, "e810.kernel-updates")
    assert found["T17.kernel-update"].severity is Severity.PASS
    assert "6.12.0-55" not in found["T17.kernel-update"].message
    assert "T02.kernel-modules" not in found
    assert "dkms autoinstall" not in str(found)
