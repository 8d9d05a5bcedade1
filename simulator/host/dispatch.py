"""How a lab host takes a command line: as ``sh`` would (``sudo``, ``sh -c``, the
transport's file-writing, value-writing, batch and nvidia-smi scripts), then to the tool of
its first word: a lab tool registered for a ``Command`` (``@lab_tool(COMMAND)``, keyed by
the same object the step runs, wizard/facts/command.py) or the host model's
``cmd_<name>`` handler; else ``command not found`` like bash."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from simulator.host.model import Result
from wizard.driver_root import DRIVER_ROOT, NVIDIA_SMI_SCRIPT
from wizard.facts.command import Command
from wizard.transports.base import WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT
from wizard.transports.batch import BATCH_SCRIPT, BatchPart, encode_batch_output

if TYPE_CHECKING:
    from simulator.host.machine import LabHost


_TRANSPORT_SCRIPTS = (WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT, BATCH_SCRIPT, NVIDIA_SMI_SCRIPT)

# A lab tool: what the host answers for the program's arguments (after its name).
LabTool = Callable[["LabHost", list[str]], Result]

# The lab's tools by program name, each with the Command it was registered for: the
# shell's PATH holds them (simulator/shell.py), and tests/test_lab_tools.py runs every
# registered Command on a lab host and parses what it answers.
LAB_TOOLS: dict[str, tuple[Command[Any], LabTool]] = {}


def lab_tool(command: Command[Any]) -> Callable[[LabTool], LabTool]:
    """Register ``tool`` as the lab host's answer to ``command`` (its program: the model
    of the vendor's tool, which names its source). One program, one tool."""

    def register(tool: LabTool) -> LabTool:
        # (a host model method of the same name is refused by tests/test_lab_tools.py)
        if command.tool in LAB_TOOLS:
            raise RuntimeError(f"the lab already has a tool for {command.tool}")
        LAB_TOOLS[command.tool] = (command, tool)
        return tool

    return register


def forget_lab_tool(command: Command[Any]) -> None:
    """Remove a registered tool (a test that registered its own)."""
    LAB_TOOLS.pop(command.tool, None)


def _method(program: str) -> str:
    return "cmd_" + program.replace("-", "_").replace(".", "_")


def tool_for(host: LabHost, program: str) -> Callable[[list[str]], Result] | None:
    """The handler of ``program`` on ``host``: a registered lab tool or a model method."""
    registered = LAB_TOOLS.get(program)
    if registered is not None:
        return partial(registered[1], host)
    return getattr(host, _method(program), None)


def without_sudo(argv: list[str]) -> list[str]:
    """The command behind the transport's ``sudo -n --`` prefix (wizard/transports/ssh.py
    writes it in front of every command of a site with ``use_sudo``), as the host's shell
    runs it once sudo has let it through."""
    while argv and argv[0] in ("sudo", "-n", "--"):
        argv = argv[1:]
    return argv


def in_process(command: str) -> bool:
    """Whether the lab answers ``command`` in-process instead of in the host's real shell:
    the wizard's fixed transport scripts (``sh -c SCRIPT ...``, perhaps behind ``sudo -n
    --``; see simulator/shell.py for why), and ``ulimit``, a shell builtin that reports
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
    argv = without_sudo(argv)
    return argv[:2] == ["sh", "-c"] and len(argv) > 2 and argv[2] in _TRANSPORT_SCRIPTS


class CommandDispatchMixin:
    """A command line to its handler: what the shell in front of the real host does."""

    def execute(self: LabHost, command: str, stdin: str = "") -> Result:
        """Run one command line the wizard sent (recorded in ``commands``), in-process:
        the transport's fixed scripts and simple argv (tests, the probe batch)."""
        self.commands.append(command)
        return self.run_line(command, stdin)

    def run_argv(self: LabHost, argv: list[str], stdin: str = "") -> Result:
        """One tool call of the host's real shell (simulator/shell.py): argv[0] is the
        tool's name, the rest its arguments as the shell passed them."""
        self._stdin = stdin
        handler = tool_for(self, argv[0])
        if handler is None:
            return Result(stderr=f"{argv[0]}: command not found\n", exit_status=127)
        return handler(argv[1:])

    @property
    def ssh_over_bond1(self: LabHost) -> bool:
        """The SSH session runs over bond1: on its address, or on a VLAN stacked on it."""
        return "ssh-over-bond1" in self.faults or "ssh-over-bond1-vlan" in self.faults

    @property
    def rdma_ip_interface(self: LabHost) -> str:
        """Which interface holds the bond's address: bond1, or its VLAN bond1.100."""
        return f"{self.bond_name}.100" if "ssh-over-bond1-vlan" in self.faults else self.bond_name

    def ssh_connection(self: LabHost) -> str:
        """$SSH_CONNECTION as sshd sets it (client address and port, server address and
        port); the server side is the bond's address when SSH runs over bond1."""
        server = self.rdma_ip if self.ssh_over_bond1 else self.mgmt_ip
        return f"10.10.255.1 51514 {server} 22"

    def run_line(self: LabHost, command: str, stdin: str = "") -> Result:
        self._stdin = stdin
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return Result(stderr=f"sh: syntax error: {exc}\n", exit_status=2)
        argv = without_sudo(argv)
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
        handler = tool_for(self, argv[0])
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
