"""Each lab host's own filesystem view (simulator/rootfs.py): what a real program writes
there lands in that host's model and nowhere else, what the model holds a real program
reads, the machine itself stays read-only, and files sent over the host's SFTP (OpenSSH's
sftp-server) land in the model too."""

from __future__ import annotations

import asyncio
import os
import shlex

import pytest

from simulator.lab import Lab
from simulator.rootfs import bwrap_available
from simulator.shell import SFTP_SERVERS, LabShell
from wizard.transports.base import write_file_command

MODPROBE = "/etc/modprobe.d/lab-test.conf"


@pytest.fixture
def sandbox() -> None:
    if not bwrap_available():
        if os.environ.get("CI"):
            pytest.fail("bubblewrap is missing: .ci/run installs it")
        pytest.skip("bubblewrap not installed")


async def test_a_real_programs_writes_land_in_its_own_hosts_model(sandbox, tmp_path):
    async with Lab(tmp_path / "lab", nodes=2) as lab:
        shell: LabShell = lab.shell
        assert shell.sandbox
        one, two = lab.gpu_hosts()
        # Python's open() and coreutils' mv, as Ansible's copy module writes a file.
        ran = await shell.exec(
            one,
            "python3 -c \"open('/etc/modprobe.d/.x', 'w').write('options irdma roce_ena=1\\\\n')\""
            f" && mv /etc/modprobe.d/.x {MODPROBE} && mkdir -p /etc/lab-test.d",
        )
        assert ran.exit_status == 0, ran.stderr
        assert one.files[MODPROBE] == "options irdma roce_ena=1\n"
        assert MODPROBE not in two.files
        seen = await shell.exec(two, f"python3 -c \"open('{MODPROBE}')\"")
        assert seen.exit_status == 1 and "No such file" in seen.stderr
        # The wizard's own read (the model's cat) sees what the real program wrote.
        assert (await shell.exec(one, f"cat {MODPROBE}")).stdout == "options irdma roce_ena=1\n"
        # And a real program sees what the model holds, the files it synthesizes too.
        one.files["/etc/NetworkManager/system-connections/bond1.nmconnection"] = "[bond]\n"
        read = await shell.exec(
            one,
            "python3 -c \"import sys; sys.stdout.write(open('/etc/NetworkManager/system-"
            "connections/bond1.nmconnection').read() + open('/etc/os-release').readline())\"",
        )
        assert read.stdout == '[bond]\nNAME="Red Hat Enterprise Linux"\n', read.stderr
        # A file the model's tee writes within the same shell, then a real program reads.
        both = await shell.exec(
            one, "echo from-tee | tee /etc/lab-tee >/dev/null && python3 -c "
            "\"print(open('/etc/lab-tee').read().strip())\""
        )  # fmt: skip
        assert both.stdout == "from-tee\n", both.stderr
        # A removal by a real program is the model's too.
        assert (await shell.exec(one, f"rm {MODPROBE}")).exit_status == 0
        assert MODPROBE not in one.files
        # The machine is read-only to the host: nothing outside its view changes.
        refused = await shell.exec(one, "python3 -c \"open('/usr/lab-test', 'w')\"")
        assert refused.exit_status == 1 and "Read-only file system" in refused.stderr
        assert not os.path.exists("/usr/lab-test")


async def test_the_wizards_file_writer_and_a_real_program_agree(sandbox, tmp_path):
    async with Lab(tmp_path / "lab") as lab:
        host = lab.gpu_hosts()[0]
        # The transport's file writer (in-process) changes the model; the next shell sees it.
        host.execute(
            shlex.join(write_file_command("/etc/modules-load.d/lab.conf", 0o644)), "irdma\n"
        )
        ran = await lab.shell.exec(
            host, "python3 -c \"print(open('/etc/modules-load.d/lab.conf').read(), end='')\""
        )
        assert ran.stdout == "irdma\n", ran.stderr


async def test_files_sent_over_sftp_land_in_the_hosts_model(sandbox, tmp_path):
    server_binary = next((p for p in SFTP_SERVERS if os.access(p, os.X_OK)), None)
    if server_binary is None:
        if os.environ.get("CI"):
            pytest.fail("sftp-server is missing: .ci/run installs openssh-server")
        pytest.skip("OpenSSH's sftp-server not installed")
    async with Lab(tmp_path / "lab") as lab:
        host = lab.gpu_hosts()[0]
        server = lab.servers[host.name]
        source = tmp_path / "irdma.conf"
        source.write_text("options irdma roce_ena=1\n")
        process = await asyncio.create_subprocess_exec(
            "sftp", "-b", "-", "-i", str(lab.directory / "id_ed25519"),
            "-o", f"UserKnownHostsFile={lab.directory / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-P", str(server.port), f"root@{server.address}",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(
            process.communicate(f"put {source} /etc/modprobe.d/irdma.conf\n".encode()), 60
        )
        assert process.returncode == 0, out.decode()
        assert host.files["/etc/modprobe.d/irdma.conf"] == "options irdma roce_ena=1\n"
