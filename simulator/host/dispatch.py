"""How a lab host takes a command line: as ``sh`` would (``sudo``, ``sh -c``, the
transport's file-writing, value-writing, batch and nvidia-smi scripts), then to the tool of
its first word: a lab tool registered for a ``Command`` (``@lab_tool(COMMAND)``, keyed by
the same object the step runs, wizard/facts/command.py) or the ``cmd_<name>`` handler of
one of the host's collaborators (files, pci, nic, ...); else ``command not found`` like
bash."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from simulator.host.model import Result
from wizard.driver_root import DRIVER_ROOT, NVIDIA_SMI_SCRIPT
from wizard.facts.command import Command
from wizard.transports.base import WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT
from wizard.transports.batch import BATCH_SCRIPT, BatchPart, encode_batch_output

if TYPE_CHECKING:
    from simulator.host.files import HostFiles
    from simulator.host.machine import HostState
    from simulator.host.pci import HostPci


_TRANSPORT_SCRIPTS = (WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT, BATCH_SCRIPT, NVIDIA_SMI_SCRIPT)

# A lab tool: what the host answers for the program's arguments (after its name), from the
# host's state (simulator/host/machine.py ``HostState``).
LabTool = Callable[["HostState", list[str]], Result]
# A host model's handler: ``cmd_<program>`` of a collaborator, given the arguments.
Handler = Callable[[list[str]], Result]

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


def tool_for(state: HostState, answering: Sequence[object], program: str) -> Handler | None:
    """The handler of ``program`` on a host: a registered lab tool (given the host's state)
    or the ``cmd_<program>`` method of the first of its collaborators that has one (looked
    up at each call, so a test may replace one on an instance)."""
    registered = LAB_TOOLS.get(program)
    if registered is not None:
        return partial(registered[1], state)
    for collaborator in answering:
        handler = getattr(collaborator, _method(program), None)
        if handler is not None:
            return handler
    return None


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


class CommandDispatch:
    """A command line to its handler: what the shell in front of the real host does. It
    records each command in the host's state, hands the transport's file and value writers
    to ``files`` and the driver container's nvidia-smi to ``pci``, and any other program
    to the collaborators in ``answering`` (their ``cmd_<program>`` methods)."""

    def __init__(
        self, state: HostState, answering: Sequence[object], files: HostFiles, pci: HostPci
    ) -> None:
        self.state = state
        self.answering = tuple(answering)
        self.files = files
        self.pci = pci

    def execute(self, command: str, stdin: str = "") -> Result:
        """Run one command line the wizard sent (recorded in ``commands``), in-process:
        the transport's fixed scripts and simple argv (tests, the probe batch)."""
        self.state.commands.append(command)
        return self.run_line(command, stdin)

    def run_argv(self, argv: list[str], stdin: str = "") -> Result:
        """One tool call of the host's real shell (simulator/shell.py): argv[0] is the
        tool's name, the rest its arguments as the shell passed them."""
        self.state.stdin = stdin
        handler = tool_for(self.state, self.answering, argv[0])
        if handler is None:
            return Result(stderr=f"{argv[0]}: command not found\n", exit_status=127)
        return handler(argv[1:])

    def ssh_connection(self) -> str:
        """$SSH_CONNECTION as sshd sets it (client address and port, server address and
        port); the server side is the bond's address when SSH runs over bond1."""
        server = self.state.rdma_ip if self.state.ssh_over_bond1 else self.state.mgmt_ip
        return f"10.10.255.1 51514 {server} 22"

    def run_line(self, command: str, stdin: str = "") -> Result:
        self.state.stdin = stdin
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return Result(stderr=f"sh: syntax error: {exc}\n", exit_status=2)
        argv = without_sudo(argv)
        if argv[:3] == ["sh", "-c", WRITE_FILE_SCRIPT] and len(argv) == 6:
            # What a shell does with the transport's file-writing script.
            self.files.write_file(argv[5], stdin)
            return Result()
        if argv[:3] == ["sh", "-c", WRITE_VALUE_SCRIPT] and len(argv) == 6:
            return self.files.write_value(argv[5], argv[4])
        if argv[:4] == ["sh", "-c", BATCH_SCRIPT, "sh"]:
            return self._batch(argv[4:])
        if argv[:4] == ["sh", "-c", NVIDIA_SMI_SCRIPT, "sh"] and len(argv) >= 5:
            # What the script does: chroot into the driver container's root when it holds
            # nvidia-smi, else the host's PATH (wizard/driver_root.py).
            if argv[4] == DRIVER_ROOT and self.state.gpu_driver and self.state.role == "gpu":
                return self.pci.nvidia_smi(argv[5:])
            return self.execute(shlex.join(["nvidia-smi", *argv[5:]]))
        if argv[:2] == ["sh", "-c"] and len(argv) >= 3:
            return self.execute(argv[2], stdin)
        if not argv:
            return Result()
        handler = tool_for(self.state, self.answering, argv[0])
        if handler is None:
            return Result(stderr=f"bash: line 1: {argv[0]}: command not found\n", exit_status=127)
        return handler(argv[1:])

    def _batch(self, commands: list[str]) -> Result:
        """What a shell does with the transport's batch script: each command in turn, its
        status and output framed by byte counts (wizard/transports/batch.py)."""
        parts = []
        for index, command in enumerate(commands):
            result = self.execute(command)
            parts.append(
                BatchPart(index, result.exit_status, result.stdout.encode(), result.stderr.encode())
            )
        return Result(stdout=encode_batch_output(parts).decode())
