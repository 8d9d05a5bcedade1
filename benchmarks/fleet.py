"""A fleet `check` measured as costs, with fair baselines on the same lab and probe set.

    python benchmarks/fleet.py --nodes 64              # wizard, parallel-ssh, tuned Ansible
    python benchmarks/fleet.py --nodes 1000 --no-baselines

Why costs and not only wall times: on a 2-core machine the lab's simulated hosts (Python
asyncssh servers) share the CPU with the client, so a wall-time ratio moves with whatever
else runs. The client's own CPU seconds and peak memory are stable, and the lower bound the
machine allows for a run is the CPU everything needed (lab + client) divided by the cores.

- The lab runs in its own process (``gpu-node-wizard lab``); its CPU is read from
  /proc/PID/stat before and after each client run, so one lab serves all three clients.
- Each client runs as a child of this process, which is a child subreaper
  (PR_SET_CHILD_SUBREAPER): descendants that daemonise (OpenSSH ControlPersist masters
  under Ansible) are reparented here, ended by their pid and reaped, so their CPU is
  counted in RUSAGE_CHILDREN like everything else the client started.
- The probe set is what the wizard's `check` sent to one node, read from its journal (28
  commands today, duplicates included); both baselines run exactly those commands.
- parallel-ssh (Debian's ``pssh``) runs them in one exec per host (the wizard's own batch
  script, wizard/transports/batch.py: plain POSIX sh, which the lab plays), ``-p N``: the
  floor for "run these commands on N hosts" with OpenSSH.
- Ansible runs one playbook, one ``raw`` task per probe (the lab's hosts have no Python, as
  many appliances), ``forks`` = N, ``strategy: free``, ``gather_facts: false``,
  ``pipelining``, ``ControlMaster=auto``/``ControlPersist`` and no ``-C`` (compression
  only costs CPU on loopback). ``raw`` over a persistent master is one channel per task.
- Both OpenSSH clients are offered the cipher the wizard prefers (aes128-gcm), so the
  lab's server does the same work per byte for every client.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wizard.transports.batch import batch_command  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"]  # fmt: skip


@dataclass
class Cost:
    """What one client run took: wall time, its own CPU, its peak RSS, the lab's CPU."""

    what: str
    nodes: int
    wall_s: float
    cpu_s: float  # user + sys of the client and everything it started
    rss_kb: int  # peak resident set of the client's main process (ru_maxrss of wait4)
    lab_cpu_s: float
    ok: bool
    detail: str = ""

    @property
    def bound_s(self) -> float:
        """The shortest wall time this machine allows: all the CPU the run needed / cores."""
        return (self.cpu_s + self.lab_cpu_s) / CORES

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "bound_s": round(self.bound_s, 3)}


class Lab:
    """A `gpu-node-wizard lab` process serving ``nodes`` simulated GPU nodes."""

    def __init__(self, directory: Path, nodes: int) -> None:
        self.directory = directory
        self.nodes = nodes
        self.site = directory / "site.yaml"
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "frontend.cli", "lab", "--write-site", str(self.site),
             "--nodes", str(nodes)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("try:"):
                break
        else:
            stderr = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"the {nodes}-node lab did not start: {stderr[-500:]}")
        self.start_s = time.perf_counter() - started

    def cpu_seconds(self) -> float:
        """The lab's user + sys CPU so far (its waited-for children included)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # Fields 14-17 of proc(5) (utime stime cutime cstime), counted after the comm field.
        return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS

    def hosts(self) -> list[tuple[str, str, int]]:
        import yaml

        site = yaml.safe_load(self.site.read_text())
        return [(n["name"], n["host"], n["ssh"]["port"]) for n in site["nodes"]]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def lab(directory: Path, nodes: int) -> Iterator[Lab]:
    served = Lab(directory, nodes)
    try:
        yield served
    finally:
        served.stop()


def become_subreaper() -> None:
    """Orphaned descendants (daemonised ssh masters) are reparented to this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _children(keep: set[int]) -> list[int]:
    """This process's children other than ``keep`` (the lab)."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return [p for p in found if p not in keep]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    what: str, argv: list[str], served: Lab, *, env: dict[str, str] | None = None,
    timeout: float = 1800.0, cwd: Path = ROOT,
) -> tuple[Cost, str, str]:  # fmt: skip
    """Run ``argv`` against ``served``; its cost, stdout and stderr."""
    before_cpu, before_lab = _children_cpu(), served.cpu_seconds()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        lab_cpu = served.cpu_seconds() - before_lab
        # What the client left running (ssh ControlPersist masters): end it, reap it, count it.
        for orphan in _children({served.process.pid}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(orphan, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(orphan, 0)
        cpu = _children_cpu() - before_cpu
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    cost = Cost(what, served.nodes, wall, cpu, usage.ru_maxrss, lab_cpu, process.returncode == 0)
    if not cost.ok:
        cost.detail = f"exit {process.returncode}: {stderr.strip()[-300:]}"
    return cost, stdout, stderr


def wizard_check(served: Lab, state: Path) -> Cost:
    cost, _, _ = measure(
        "wizard check",
        [sys.executable, "-m", "frontend.cli", "check", str(served.site), "--json",
         "--state-dir", str(state)],
        served,
    )  # fmt: skip
    return cost


def probe_set(state: Path, node: str) -> list[str]:
    """The commands the wizard's check sent to ``node``, in order, from its journal."""
    journals = sorted(state.rglob("journal.jsonl"))
    if not journals:
        raise RuntimeError(f"no journal under {state}")
    commands = []
    for line in journals[0].read_text().splitlines():
        entry = json.loads(line)
        if entry.get("target") == node and entry.get("command"):
            commands.append(entry["command"])
    return commands


def parallel_ssh(served: Lab, probes: list[str], folder: Path) -> Cost:
    """Debian's parallel-ssh: every probe in one exec per host, N hosts at once."""
    binary = shutil.which("parallel-ssh") or shutil.which("pssh")
    if binary is None:
        return Cost("parallel-ssh", served.nodes, 0, 0, 0, 0, False, "not installed (apt install pssh)")  # fmt: skip
    folder.mkdir(parents=True)
    hosts = folder / "hosts"
    hosts.write_text("".join(f"root@{h}:{p}\n" for _, h, p in served.hosts()))
    options = [*SSH_OPTIONS, "-o", f"UserKnownHostsFile={served.directory / 'known_hosts'}",
               "-i", str(served.directory / "id_ed25519")]  # fmt: skip
    command = shlex.join(batch_command(probes))
    cost, _, _ = measure(
        "parallel-ssh",
        [binary, "-h", str(hosts), "-p", str(served.nodes), "-t", "0", "-o", str(folder / "out"),
         "-e", str(folder / "err"), "-x", shlex.join(options), command],
        served,
    )  # fmt: skip
    outputs = list((folder / "out").iterdir()) if (folder / "out").exists() else []
    complete = sum(1 for f in outputs if f.read_bytes().count(b"GNW-BATCH ") == len(probes))
    if complete != served.nodes:
        cost.ok = False
        cost.detail = f"{complete}/{served.nodes} hosts answered every probe; {cost.detail}"
    return cost


def ansible(served: Lab, probes: list[str], folder: Path) -> Cost:
    """One playbook, a raw task per probe, tuned as an experienced Ansible user would."""
    binary = shutil.which("ansible-playbook")
    if binary is None:
        return Cost("ansible", served.nodes, 0, 0, 0, 0, False, "not installed (pip install ansible-core)")  # fmt: skip
    folder.mkdir(parents=True)
    key = served.directory / "id_ed25519"
    (folder / "hosts.ini").write_text(
        "[gpu]\n"
        + "".join(f"{n} ansible_host={h} ansible_port={p} ansible_user=root "
                  f"ansible_ssh_private_key_file={key}\n" for n, h, p in served.hosts())
    )  # fmt: skip
    ssh_args = shlex.join(
        [*SSH_OPTIONS, "-o", "ControlMaster=auto", "-o", "ControlPersist=120s",
         "-o", f"UserKnownHostsFile={served.directory / 'known_hosts'}"]
    )  # fmt: skip
    (folder / "ansible.cfg").write_text(
        "[defaults]\n"
        f"inventory = {folder / 'hosts.ini'}\n"
        f"forks = {served.nodes}\n"
        "strategy = free\n"
        "gathering = explicit\n"
        "host_key_checking = True\n"
        "retry_files_enabled = False\n"
        f"local_tmp = {folder / 'tmp'}\n"
        "[ssh_connection]\n"
        "pipelining = True\n"
        f"ssh_args = {ssh_args}\n"
        f"control_path_dir = {folder / 'cp'}\n"
    )
    tasks = "".join(
        f"    - name: probe {i}\n      raw: {json.dumps(command)}\n      register: probe_{i}\n"
        "      changed_when: false\n      failed_when: false\n"  # the exit status is data
        for i, command in enumerate(probes)
    )
    playbook = folder / "probes.yml"
    playbook.write_text(f"- hosts: gpu\n  gather_facts: false\n  strategy: free\n  tasks:\n{tasks}")
    env = {**os.environ, "ANSIBLE_CONFIG": str(folder / "ansible.cfg"),
           "ANSIBLE_HOME": str(folder / "home")}  # fmt: skip
    cost, stdout, _ = measure("ansible", [binary, str(playbook)], served, env=env, cwd=folder)
    recap = [line for line in stdout.splitlines() if " : ok=" in line]
    fine = sum(1 for line in recap if f"ok={len(probes)} " in line and "failed=0" in line
               and "unreachable=0" in line)  # fmt: skip
    if fine != served.nodes:
        cost.ok = False
        cost.detail = f"{fine}/{served.nodes} hosts ran every probe; {cost.detail or stdout[-300:]}"
    return cost


def fleet(
    nodes: int, tmp: Path, *, baselines: bool = True, repeat: int = 1
) -> tuple[float, list[Cost]]:
    """The lab's start time and the costs of the wizard (and the baselines) on one lab.

    The wizard and parallel-ssh are the best of ``repeat`` runs (by wall time; a fresh
    state folder each time); Ansible, which takes minutes on a fleet, runs once."""
    become_subreaper()
    with lab(tmp / f"lab-{nodes}", nodes) as served:
        runs = [wizard_check(served, tmp / f"state-{nodes}-{i}") for i in range(repeat)]
        costs = [min(runs, key=lambda c: (not c.ok, c.wall_s))]
        if baselines:
            probes = probe_set(tmp / f"state-{nodes}-0", served.hosts()[0][0])
            pssh = [parallel_ssh(served, probes, tmp / f"pssh-{nodes}-{i}") for i in range(repeat)]
            costs.append(min(pssh, key=lambda c: (not c.ok, c.wall_s)))
            costs.append(ansible(served, probes, tmp / f"ansible-{nodes}"))
        return served.start_s, costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64, help="lab nodes (1-1000; default 64)")
    parser.add_argument("--no-baselines", action="store_true", help="the wizard only")
    parser.add_argument("--json", action="store_true", help="print the costs as JSON")
    args = parser.parse_args()
    if not 1 <= args.nodes <= 1000:
        parser.error(f"--nodes {args.nodes}: the lab serves 1 to 1000 nodes")
    with tempfile.TemporaryDirectory(prefix="gnw-fleet-") as name:
        start, costs = fleet(args.nodes, Path(name), baselines=not args.no_baselines)
    if args.json:
        print(json.dumps({"lab_start_s": start, "costs": [c.to_json() for c in costs]}))
        return 0
    print(f"{args.nodes}-node lab started in {start:.1f} s; {CORES} cores")
    for c in costs:
        state = "ok" if c.ok else f"FAILED ({c.detail})"
        print(f"  {c.what:<13} wall {c.wall_s:7.2f} s  cpu {c.cpu_s:7.2f} s  rss {c.rss_kb / 1024:6.1f} MB"
              f"  lab cpu {c.lab_cpu_s:7.2f} s  bound {c.bound_s:6.2f} s  {state}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
