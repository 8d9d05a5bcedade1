"""A real POSIX shell for the lab's hosts.

Scripts that the wizard installs (the boot-time QoS unit) or exports (apply, rollback)
contain shell logic: loops that wait for the bond, device discovery from `rdma link`,
`case` on their output. To judge them as a real host would, the lab runs them in the real
``/bin/sh`` with a ``PATH`` that holds only stand-ins: every external command a script
calls (``dcb``, ``ip``, ``rdma``, ``cat``, ``tee``, ``mkdir`` ...) is a tiny program that
hands its argv and stdin to the simulated host over a Unix socket and prints the host's
answer. Shell builtins (``printf``, ``read``, ``case``, ``[``) are the shell's own.

Nothing a script does can touch this machine: no real command is on its ``PATH``, it runs
in an empty scratch folder, and a script that redirects output to a file (``> /sys/...``)
is refused before it runs, since that write would bypass the host model. Scripts write
values with ``tee`` (``printf '%s\\n' 96 | tee PATH >/dev/null``), which the model answers.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wizard.lab.scratch import scratch_dir

if TYPE_CHECKING:
    from wizard.lab.host import LabHost

# A redirection into a file other than /dev/null (``> x``, ``>> x``, ``2> x``); ``>&2`` and
# ``2>&1`` are fine.
_FILE_REDIRECT = re.compile(r"(?<![<>&0-9])\d?>{1,2}\s*(?!&|/dev/null\b)[^\s;|&)]+")

_STUB = """#!{python}
# gpu-node-wizard lab: the simulated host answers this command (wizard/lab/shell.py).
import json, os, socket, sys
data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
request = {{"host": os.environ["GNW_LAB_HOST"], "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
           "stdin": data.decode(errors="replace")}}
with socket.socket(socket.AF_UNIX) as conn:
    conn.connect(os.environ["GNW_LAB_SOCKET"])
    conn.sendall(json.dumps(request).encode() + b"\\n")
    raw = b""
    while not raw.endswith(b"\\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        raw += chunk
answer = json.loads(raw)
sys.stdout.write(answer["stdout"])
sys.stderr.write(answer["stderr"])
sys.exit(answer["exit"])
"""

# Commands a host has beyond the model's own cmd_* handlers.
_EXTRA_COMMANDS = ("tee", "sleep", "test-ok")


@dataclass
class ScriptResult:
    exit_status: int
    stdout: str
    stderr: str


class LabShell:
    """One socket and one folder of stand-ins, shared by every host of a lab."""

    def __init__(self, hosts: dict[str, LabHost]) -> None:
        self.hosts = hosts
        # Unix socket paths are limited to ~107 bytes: a short folder of its own.
        self.folder = scratch_dir("gnw-sh-")  # a killed lab's is swept (scratch.py)
        self.socket = self.folder / "host.sock"
        self.bin = self.folder / "bin"
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        from wizard.lab.host import LabHost

        self.bin.mkdir()
        stub = _STUB.format(python=sys.executable)
        names = {n[4:] for n in dir(LabHost) if n.startswith("cmd_")} | set(_EXTRA_COMMANDS)
        for name in sorted(names):
            for spelling in {name, name.replace("_", "-")}:
                path = self.bin / spelling
                path.write_text(stub)
                path.chmod(0o755)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        shutil.rmtree(self.folder, ignore_errors=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = json.loads(await reader.readline())
            host = self.hosts[request["host"]]
            result = host.execute(shlex.join(request["argv"]), request.get("stdin", ""))
            answer = {"stdout": result.stdout, "stderr": result.stderr, "exit": result.exit_status}
        except Exception as exc:
            answer = {
                "stdout": "",
                "stderr": f"lab shell: {type(exc).__name__}: {exc}\n",
                "exit": 127,
            }
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
        writer.close()

    async def run(
        self, host: LabHost, script: str, *args: str, timeout: float = 60
    ) -> ScriptResult:
        """Run ``script`` on ``host`` in /bin/sh, as the host's own shell would."""
        redirect = next(
            (m.group(0) for line in script.splitlines() if not line.lstrip().startswith("#")
             for m in _FILE_REDIRECT.finditer(line)),
            None,
        )  # fmt: skip
        if redirect is not None:
            return ScriptResult(126, "", f"lab shell: refused, the script writes a file with "
                                          f"`{redirect}` (use tee)\n")  # fmt: skip
        with tempfile.TemporaryDirectory(dir=self.folder) as scratch:
            path = Path(scratch) / "script.sh"
            path.write_text(script)
            env = {"PATH": str(self.bin), "GNW_LAB_HOST": host.name,
                   "GNW_LAB_SOCKET": str(self.socket), "HOME": scratch, "LC_ALL": "C"}  # fmt: skip
            process = await asyncio.create_subprocess_exec(
                "/bin/sh", str(path), *args, cwd=scratch, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(process.communicate(), timeout)
            except TimeoutError:
                process.kill()
                await process.wait()
                return ScriptResult(124, "", f"lab shell: the script ran over {timeout:g}s\n")
        return ScriptResult(process.returncode or 0, out.decode(), err.decode())

    async def boot(self, host: LabHost) -> list[ScriptResult]:
        """What systemd does at boot: the enabled oneshot units ordered before the network
        (``Before=network-pre.target``) run first, then the network comes up (the bond
        forms), then the others (``After=network-online.target``), each ExecStart in turn."""
        early, late = [], []
        for unit in sorted(host.enabled_units):
            text = host.files.get(f"/etc/systemd/system/{unit}", "")
            (early if "network-pre.target" in _directive(text, "Before") else late).append(
                (unit, text)
            )
        results = [await self._unit(host, unit, text) for unit, text in early]
        host.form_bond()
        results += [await self._unit(host, unit, text) for unit, text in late]
        return [r for r in results if r is not None]

    async def _unit(self, host: LabHost, unit: str, text: str) -> ScriptResult | None:
        start = _directive(text, "ExecStart")
        command = shlex.split(start) if start else []
        if not command:
            return None
        result = await self.run(host, host.files.get(command[0], ""), *command[1:])
        host.boot_log.append(
            {
                "unit": unit,
                "exit": result.exit_status,
                "stdout": result.stdout,
                "stderr": result.stderr,
            }
        )
        return result


def _directive(unit_text: str, key: str) -> str:
    """The values of ``key=`` lines of a unit file, joined by spaces."""
    return " ".join(
        line.split("=", 1)[1].strip()
        for line in unit_text.splitlines()
        if line.strip().startswith(f"{key}=")
    )
