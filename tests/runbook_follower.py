"""RUNBOOK.md followed as its introduction tells an operator to, line by line, from the
export folder: what a test may do and nothing more.

Where a line runs is what the introduction says: `kubectl` and helm lines and those whose
comment says `from the jump host` run here (a shell in the export folder after the
opening block); `on HOST` lines on that host, every other line on the section's GPU node,
each through `ssh -F ansible/ssh_config ADDRESS`. A step with a "By hand" block is followed
by that block (from here) instead of its "Commands". The placeholders are filled from the
commands the introduction names (`rdma link` for `<rdma-dev>` and the netdev, `ibv_devinfo`
for `<gid-index>`, `ls -1 /boot` for `<kernel>`), on the host the line runs on. A comment
that makes a line conditional is acted on only in the few forms written below; any other
(`when ...` that names no command to read) is a line that cannot be followed, and fails.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)
# The phrases a follower acts on; anything else conditional cannot be followed.
_UNCONDITIONAL_READ = ("only when irdma.verify recorded no device", "then, for the device")
_CONDITIONAL = re.compile(r"\b(only when|unless|when it|if )")
_UNTIL_BOUND = re.compile(r"at most (\d+) s")


@dataclass
class Ran:
    where: str
    line: str
    returncode: int
    stdout: str
    stderr: str


# Where a line's output ends and its shell's variables begin, then its exported ones
# (Follower._local).
VARS_MARK = "__gnw_follower_shell_variables__"
EXPORTS_MARK = "__gnw_follower_exported_variables__"


@dataclass
class Follower:
    out: Path
    opening: str
    node: str  # the section's GPU node's address
    hosts: dict[str, str]  # host name (node or AIStor peer) -> address
    env: dict[str, str]
    # What the lab cannot answer as a cluster would: {part of a line: what it says instead}.
    lab_limits: dict[str, str] = field(default_factory=dict)
    # The introduction's `install` form (`ssh -F ansible/ssh_config HOST WRITER < FILE`).
    file_writer: str = ""
    ran: list[Ran] = field(default_factory=list)
    _servers: list[subprocess.Popen] = field(default_factory=list)
    _found: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # The operator's shell's own GNW_ variables that are not exported: {name: assignment}.
    _shell: dict[str, str] = field(default_factory=dict)

    # -- where a line runs ------------------------------------------------------------

    def _local(self, command: str, timeout: float) -> subprocess.CompletedProcess:
        """One line in the operator's shell on the jump host: the shell variables a line
        sets (the release found by `helm list -A`: GNW_RELEASE, GNW_NAMESPACE) stay set for
        the lines after it, as in the one terminal the runbook is followed in; only the
        exported ones reach a program the line starts (`sh cluster/k8s/pull-secrets.sh`),
        as in that terminal."""
        shell = "\n".join(self._shell.values())
        tail = f"printf '\\n{VARS_MARK}\\n'; set; printf '\\n{EXPORTS_MARK}\\n'; export -p"
        done = subprocess.run(
            ["sh", "-ec", f"{self.opening}\n{shell}\n{command}\n{tail}"],
            cwd=self.out, capture_output=True, text=True, timeout=timeout, env=self.env,
        )  # fmt: skip
        if VARS_MARK in done.stdout:
            done.stdout, _, variables = done.stdout.partition(f"\n{VARS_MARK}\n")
            variables, _, exported = variables.partition(f"\n{EXPORTS_MARK}\n")
            names = {
                line.removeprefix("export ").partition("=")[0] for line in exported.splitlines()
            }
            for line in variables.splitlines():
                name, eq, value = line.partition("=")
                if not (eq and name.startswith("GNW_")):
                    continue
                if name in names:
                    self.env[name] = "".join(shlex.split(value))
                    self._shell.pop(name, None)
                else:
                    self._shell[name] = line
                    self.env.pop(name, None)
        return done

    def _ssh(self, address: str, command: str) -> list[str]:
        return ["ssh", "-F", "ansible/ssh_config", address, command]

    def _remote(self, address: str, command: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            self._ssh(address, command),
            cwd=self.out, capture_output=True, text=True, timeout=timeout, env=self.env,
        )  # fmt: skip

    def where(self, command: str, comment: str) -> str:
        """ "local" or the address the line runs on."""
        first = shlex.split(command.lstrip("("))[0] if command.strip() else ""
        if comment.startswith("from the jump host") or Path(first).name in ("kubectl", "helm"):
            return "local"
        match = re.match(r"on ([A-Za-z0-9.-]+)", comment)
        if match and match.group(1) in self.hosts:
            return self.hosts[match.group(1)]
        return self.node

    # -- placeholders, from the commands the runbook names ------------------------------

    def _links(self, address: str) -> list[dict]:
        ran = self._remote(address, "rdma -j link show", 60)
        assert ran.returncode == 0, ran.stderr
        return json.loads(ran.stdout)

    def fill(self, command: str, address: str) -> list[str]:
        """``command`` with its placeholders filled in (one command for each `<kernel>`)."""
        if "<kernel>" in command:
            boot = self._remote(address, "ls -1 /boot", 60).stdout.split()
            kernels = [f.removeprefix("vmlinuz-") for f in boot if f.startswith("vmlinuz-")]
            assert kernels, "ls -1 /boot lists no vmlinuz-<kernel>"
            return [c for k in kernels for c in self.fill(command.replace("<kernel>", k), address)]
        if "<rdma-dev>" in command or "<peer-netdev>" in command or "<gid-index>" in command:
            link = self._links(address)[0]
            command = command.replace("<rdma-dev>", link["ifname"])
            command = command.replace("<peer-netdev>", link["netdev"])
        if "<gid-index>" in command:
            device = re.search(r"-d (\S+)", command).group(1)  # type: ignore[union-attr]
            info = self._remote(address, f"ibv_devinfo -v -d {shlex.quote(device)}", 60).stdout
            gids = re.findall(r"GID\[\s*(\d+)\]:.*RoCE v2", info)
            assert gids, f"ibv_devinfo -v -d {device} shows no RoCE v2 GID"
            command = command.replace("<gid-index>", gids[0])
        hole = re.search(r"<[a-z][a-z0-9-]*>", command)
        assert hole is None, f"the runbook does not say where {hole.group(0)} comes from"
        return [command]

    # -- one line -----------------------------------------------------------------------

    def line(self, text: str, later: tuple[str, ...] = ()) -> None:
        if not text.strip() or text.lstrip().startswith("#"):
            return
        command, _, comment = text.partition("  # ")
        where = self.where(command, comment)
        for filled in self.fill(command, where) if where != "local" else [command]:
            self._one(filled, comment, where, absent_ok=_made_later(command, later))

    def _run(self, where: str, command: str, timeout: float) -> subprocess.CompletedProcess:
        if where == "local":
            return self._local(command, timeout)
        return self._remote(where, command, timeout)

    def _one(self, command: str, comment: str, where: str, absent_ok: bool = False) -> None:
        if re.search(r"(^|, )first\b", comment):  # a server the next lines use
            self._servers.append(subprocess.Popen(
                self._ssh(where, command), cwd=self.out, env=self.env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))  # fmt: skip
            time.sleep(0.5)  # it listens before the client connects
            return
        accepted = {0, 1} if absent_ok else {0}
        if "until it differs" in comment:
            self._until(command, where, differs_from=self._last_output(command, where))
            return
        if comment.startswith("until") or ", until" in comment:
            bound = _UNTIL_BOUND.search(comment)
            self._until(command, where, seconds=float(bound.group(1)) if bound else 120)
            return
        if "if that server still waits" in comment:
            accepted = {0, 1}  # pkill(1): 1, no process matched (it had ended by itself)
        elif "only when the helm list above lists a release of gpu-operator" in comment:
            releases = json.loads(self._last_output_of("list --all-namespaces"))
            if not any(r.get("chart", "").startswith("gpu-operator-") for r in releases):
                return
        elif (
            _CONDITIONAL.search(comment)
            and not comment.startswith(_UNCONDITIONAL_READ)
            and "when it differs" not in comment  # installing it again changes nothing
        ):
            raise AssertionError(f"cannot be followed: {command}  # {comment}")
        if command.startswith("install -m ") and where != "local":
            # The introduction's form: `ssh ... HOST WRITER < FILE`, PATH and MODE filled in.
            _, _, mode, source, target = shlex.split(command)
            writer = shlex.split(self.file_writer.split(" HOST ", 1)[1].rsplit(" < ", 1)[0])[0]
            command = writer.replace(" PATH", f" {shlex.quote(target)}").replace(
                " MODE", f" {mode}"
            )
            with open(self.out / source) as stdin:
                done = subprocess.run(
                    self._ssh(where, command), cwd=self.out, stdin=stdin,
                    capture_output=True, text=True, timeout=60, env=self.env,
                )  # fmt: skip
        else:
            done = self._run(where, command, 900)
            deadline = time.monotonic() + 30
            while self._servers and _refused(done) and time.monotonic() < deadline:
                # The server started just before may not listen yet (its ssh session and
                # shell start first): the client again, as an operator tries again.
                time.sleep(1)
                done = self._run(where, command, 900)
        self._record(where, command, done)
        limit = next((why for part, why in self.lab_limits.items() if part in command), None)
        if limit is not None and done.returncode != 0 and limit in done.stderr:
            return
        assert done.returncode in accepted, (
            f"{command}  # {comment}\n(on {where}) exit {done.returncode}: "
            f"{done.stderr[-1500:]}{done.stdout[-500:]}"
        )

    def _record(self, where: str, command: str, done: subprocess.CompletedProcess) -> None:
        self.ran.append(Ran(where, command, done.returncode, done.stdout, done.stderr))

    def _last_output(self, command: str, where: str) -> str:
        return next(r.stdout for r in reversed(self.ran) if (r.where, r.line) == (where, command))

    def _last_output_of(self, part: str) -> str:
        return next(r.stdout for r in reversed(self.ran) if part in r.line)

    def _until(self, command: str, where: str, *, differs_from: str | None = None,
               seconds: float = 120) -> None:  # fmt: skip
        """Again until it succeeds (and, with ``differs_from``, prints something else): a
        node that reboots refuses SSH for a while (exit 255)."""
        deadline = time.monotonic() + seconds
        while True:
            done = self._run(where, command, 60)
            if done.returncode == 0 and (differs_from is None or done.stdout != differs_from):
                self._record(where, command, done)
                return
            assert time.monotonic() < deadline, f"{command}: not within {seconds:g} s"
            time.sleep(1)

    # -- a block, a section -------------------------------------------------------------

    def block(self, text: str) -> None:
        try:
            lines = text.splitlines()
            for i, line in enumerate(lines):
                self.line(line, tuple(lines[i + 1 :]))
        finally:
            for server in self._servers:
                try:
                    server.wait(timeout=150)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            self._servers.clear()

    def by_hand(self, text: str) -> None:
        """A "By hand" block: from the export folder, in one shell."""
        done = self._local(text, 1800)
        self._record("local", text, done)
        assert done.returncode == 0, f"{text}\n{done.stderr[-3000:]}"


def _refused(done: subprocess.CompletedProcess) -> bool:
    """A client's "no server there yet" (perftest: "Couldn't connect to HOST:PORT"; iperf3:
    "unable to connect to server")."""
    text = done.stderr + done.stdout
    return done.returncode != 0 and ("Couldn't connect" in text or "unable to connect" in text)


def _made_later(command: str, later: tuple[str, ...]) -> bool:
    """Whether ``command`` reads what a later line of its block installs or enables (the
    introduction: such a read answers "absent", exit 1, before the first run)."""
    words = shlex.split(command) if command.strip() else []
    if words[:1] == ["cat"] and len(words) == 2:
        return any(re.match(rf"install -m \S+ \S+ {re.escape(words[1])}\b", w) for w in later)
    if words[:2] == ["systemctl", "is-enabled"]:
        return any(w.startswith("systemctl enable ") for w in later)
    return False


def sections(text: str) -> list[tuple[str, str]]:
    """(step id, section text) of every `### step: title` section, in order."""
    parts = re.split(r"^### ([a-z0-9.-]+): .*$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def follow_section(follower: Follower, section: str) -> None:
    """A step's section: its "By hand" block when it has one, else its "Commands"."""
    by_hand = re.search(r"^By hand[^\n]*:\n\n```sh\n(.*?)^```$", section, re.S | re.M)
    if by_hand:
        follower.by_hand(by_hand.group(1))
        return
    for commands in re.findall(r"^Commands[^\n]*:\n\n```sh\n(.*?)^```$", section, re.S | re.M):
        follower.block(commands)
