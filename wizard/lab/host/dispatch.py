"""How a lab host takes a command line: as ``sh`` would (``sudo``, ``sh -c``, the
transport's file-writing, value-writing, batch and nvidia-smi scripts), then to the
``cmd_<name>`` handler of its first word, or ``command not found`` like bash."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from wizard.driver_root import DRIVER_ROOT, NVIDIA_SMI_SCRIPT
from wizard.lab.host.model import Result
from wizard.transports.base import WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT
from wizard.transports.batch import BATCH_SCRIPT, BatchPart, encode_batch_output

if TYPE_CHECKING:
    from wizard.lab.host.machine import LabHost


_TRANSPORT_SCRIPTS = (WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT, BATCH_SCRIPT, NVIDIA_SMI_SCRIPT)


def in_process(command: str) -> bool:
    """Whether the lab answers ``command`` in-process instead of in the host's real shell:
    the wizard's fixed transport scripts (``sh -c SCRIPT ...``, perhaps behind ``sudo -n
    --``; see wizard/lab/shell.py for why), and ``ulimit``, a shell builtin that reports
    the shell's own limits: the model's (unlimited locked memory) cannot be given to a
    real process without CAP_SYS_RESOURCE, which this machine does not have."""
    if command.startswith("ulimit "):
        return True
    if not command.startswith(("sh -c ", "sudo -n -- sh -c ")):
        return False
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    while argv and argv[0] in ("sudo", "-n", "--"):
        argv = argv[1:]
    return argv[:2] == ["sh", "-c"] and len(argv) > 2 and argv[2] in _TRANSPORT_SCRIPTS


class CommandDispatchMixin:
    """A command line to its handler: what the shell in front of the real host does."""

    def execute(self: LabHost, command: str, stdin: str = "") -> Result:
        """Run one command line the wizard sent (recorded in ``commands``), in-process:
        the transport's fixed scripts and simple argv (tests, the probe batch)."""
        self.commands.append(command)
        return self.run_line(command, stdin)

    def run_argv(self: LabHost, argv: list[str], stdin: str = "") -> Result:
        """One tool call of the host's real shell (wizard/lab/shell.py): argv[0] is the
        tool's name, the rest its arguments as the shell passed them."""
        self._stdin = stdin
        handler = getattr(self, "cmd_" + argv[0].replace("-", "_").replace(".", "_"), None)
        if handler is None:
            return Result(stderr=f"{argv[0]}: command not found\n", exit_status=127)
        return handler(argv[1:])

    def ssh_connection(self: LabHost) -> str:
        """$SSH_CONNECTION as sshd sets it (client address and port, server address and
        port); the server side is the bond's address when SSH runs over bond1."""
        server = self.rdma_ip if "ssh-over-bond1" in self.faults else self.mgmt_ip
        return f"10.10.255.1 51514 {server} 22"

    def run_line(self: LabHost, command: str, stdin: str = "") -> Result:
        self._stdin = stdin
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return Result(stderr=f"sh: syntax error: {exc}\n", exit_status=2)
        while argv and argv[0] in ("sudo", "-n", "--"):
            argv = argv[1:]
        if argv[:3] == ["sh", "-c", WRITE_FILE_SCRIPT] and len(argv) == 6:
            # What a shell does with the transport's file-writing script.
            self.write_file(argv[5], stdin)
            return Result()
        if argv[:3] == ["sh", "-c", WRITE_VALUE_SCRIPT] and len(argv) == 6:
            return self.write_value(argv[5], argv[4])
        if argv[:4] == ["sh", "-c", BATCH_SCRIPT, "sh"]:
            return self._batch(argv[4:])
        if argv[:4] == ["sh", "-c", NVIDIA_SMI_SCRIPT, "sh"] and len(argv) >= 5:
            # What the script does: chroot into the driver container's root when it holds
            # nvidia-smi, else the host's PATH (wizard/driver_root.py).
            if argv[4] == DRIVER_ROOT and self.gpu_driver and self.role == "gpu":
                return self.nvidia_smi(argv[5:])
            return self.execute(shlex.join(["nvidia-smi", *argv[5:]]))
        if argv[:2] == ["sh", "-c"] and len(argv) >= 3:
            return self.execute(argv[2], stdin)
        if not argv:
            return Result()
        handler = getattr(self, "cmd_" + argv[0].replace("-", "_").replace(".", "_"), None)
        if handler is None:
            return Result(stderr=f"bash: line 1: {argv[0]}: command not found\n", exit_status=127)
        return handler(argv[1:])

    def _batch(self: LabHost, commands: list[str]) -> Result:
        """What a shell does with the transport's batch script: each command in turn, its
        status and output framed by byte counts (wizard/transports/batch.py)."""
        parts = []
        for index, command in enumerate(commands):
            result = self.execute(command)
            parts.append(
                BatchPart(index, result.exit_status, result.stdout.encode(), result.stderr.encode())
            )
        return Result(stdout=encode_batch_output(parts).decode())
