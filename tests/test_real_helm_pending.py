"""helm's pending state after a kill -9 in the middle of the wizard's `helm upgrade
--install --wait`, on the real control plane with the real helm: the next run sees it,
says so, and resolves it (its own interrupted operation, by the journal), never forcing:
pending-install (uninstalled) and pending-upgrade (rolled back to the last deployed
revision), each with the real helm binary."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time

import yaml

from simulator.controlplane import build
from simulator.controlplane.client import Api
from simulator.controlplane.versions import HELM
from tests.conftest import REPO
from tests.real_tier import ServedLab, require_real

NODES = ("cp-1", "cpu-worker-1", "cpu-worker-2", "gpu-b300-01")


def _releases(lab: ServedLab) -> list[dict]:
    result = subprocess.run(
        [str(lab.helm), "--kubeconfig", str(lab.kubeconfig), "list", "-A", "--all", "-o", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return json.loads(result.stdout or "[]")


def _cordon(lab: ServedLab, unschedulable: bool) -> None:
    """Cordon (or uncordon) every node, as the admin of the lab's cluster."""
    pki = lab.folder / "control-plane" / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    config = yaml.safe_load(lab.kubeconfig.read_text())
    api = Api(config["clusters"][0]["cluster"]["server"], context)
    for node in NODES:
        api.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": unschedulable or None}})


def _processes_running(binary: str) -> list[int]:
    """The pids whose command line starts with ``binary`` (the lab's helm wrapper execs the
    real helm, which keeps the wrapper's argv[0]... so both forms are matched)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and (
                argv[0].decode(errors="replace") == binary
                or (len(argv) > 1 and argv[1].decode(errors="replace") == binary)
            )
            and b"upgrade" in argv
        ):
            found.append(int(entry))
    return found


def _wizard(lab: ServedLab, state: str) -> list[str]:
    argv = [sys.executable, "-m", "frontend.cli", "run", str(lab.site), "--headless", "--yes",
            "--phase", "gpu-operator", "--allow-cluster-change", "gpu-operator-install",
            "--allow-cluster-change", "gpu-operator-upgrade",  # the later runs upgrade
            "--state-dir", state]  # fmt: skip
    return argv


def test_an_install_killed_mid_way_is_seen_said_and_resolved_by_the_next_run(tmp_path):
    require_real()
    lab = ServedLab(tmp_path / "lab", "--fault", "greenfield")  # a first install
    state = str(tmp_path / "state")
    try:
        # Every node cordoned: the operator's pod cannot be scheduled, helm --wait waits.
        _cordon(lab, True)
        first = subprocess.Popen(_wizard(lab, state), cwd=REPO, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 180
        status = None
        while time.monotonic() < deadline and status != "pending-install":
            status = next(
                (r["status"] for r in _releases(lab) if r["name"] == "gpu-operator"), None
            )
            time.sleep(1)
        assert status == "pending-install"
        # The wizard and its helm, as a lost jump host or a power cut ends both (helm is
        # found by its argv).
        helms = _processes_running(str(build.binary(HELM, "helm")))
        os.killpg(first.pid, signal.SIGKILL)
        for pid in helms:
            os.kill(pid, signal.SIGKILL)
        first.wait(30)
        assert helms, "the wizard's helm was not running"
        assert [r["status"] for r in _releases(lab)] == ["pending-install"]
        _cordon(lab, False)
        second = subprocess.run(_wizard(lab, state), cwd=REPO, capture_output=True, text=True,
                                timeout=900)  # fmt: skip
        out = second.stdout + second.stderr
        assert second.returncode == 0, out[-4000:]
        assert "gpu-operator/gpu-operator is pending-install: this wizard's own" in out
        # The notice names the exact command the resolution runs (never deployed: uninstall).
        assert (
            "resolving it with `helm uninstall gpu-operator --namespace gpu-operator --wait`" in out
        )
        # The journal: the interrupted install, the uninstall, the install again; no --force.
        journal = (tmp_path / "state" / "lab" / "journal.jsonl").read_text().splitlines()
        helm = [json.loads(line)["command"].split()[1] for line in journal
                if '"target": "helm"' in line and '"command"' in line and '"intent"' in line]  # fmt: skip
        assert helm == ["upgrade", "uninstall", "upgrade"]
        assert "--force" not in "".join(journal)
        releases = [(r["name"], r["status"], r["chart"]) for r in _releases(lab)]
        assert releases == [("gpu-operator", "deployed", "gpu-operator-v26.7.0")]
    finally:
        lab.stop()


def _helm_commands(tmp_path) -> list[str]:
    journal = (tmp_path / "state" / "lab" / "journal.jsonl").read_text().splitlines()
    return [json.loads(line)["command"].split()[1] for line in journal
            if '"target": "helm"' in line and '"command"' in line and '"intent"' in line]  # fmt: skip


def test_a_killed_wizard_whose_helm_lives_on_is_waited_for_never_rolled_back_under_it(tmp_path):
    """Only the wizard is killed (kill -9 of its pid): its helm upgrade --install --wait
    lives on (here held by SIGSTOP, so that the kernel's PR_SET_PDEATHSIG SIGTERM waits
    too, wizard/transports/children.py). The next run sees the journaled helm pid alive,
    says so and waits; the release stays as helm left it (no uninstall, no rollback
    beside the running helm). When helm goes on, it gets its SIGTERM and ends, and the
    next run finishes the install."""
    require_real()
    lab = ServedLab(tmp_path / "lab", "--fault", "greenfield")  # a first install
    state = str(tmp_path / "state")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    helms: list[int] = []
    try:
        _cordon(lab, True)
        first = subprocess.Popen(_wizard(lab, state), cwd=REPO, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 180
        status = None
        while time.monotonic() < deadline and status != "pending-install":
            status = next(
                (r["status"] for r in _releases(lab) if r["name"] == "gpu-operator"), None
            )
            time.sleep(1)
        assert status == "pending-install"
        helms = _processes_running(str(build.binary(HELM, "helm")))
        assert helms, "the wizard's helm was not running"
        for pid in helms:
            os.kill(pid, signal.SIGSTOP)
        os.kill(first.pid, signal.SIGKILL)  # the wizard only
        first.wait(30)
        _cordon(lab, False)
        log = tmp_path / "second.log"
        with log.open("w") as out:
            second = subprocess.Popen(_wizard(lab, state), cwd=REPO, stdout=out,
                                      stderr=subprocess.STDOUT, env=env)  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "still runs: waiting" not in log.read_text():
            assert second.poll() is None, log.read_text()[-4000:]
            time.sleep(0.5)
        assert f"pid {helms[0]} (`" in log.read_text()
        time.sleep(3)  # the second run keeps waiting: nothing touches the release
        assert second.poll() is None
        assert [r["status"] for r in _releases(lab)] == ["pending-install"]
        assert _helm_commands(tmp_path) == ["upgrade"]
        for pid in helms:
            os.kill(pid, signal.SIGCONT)  # its pending SIGTERM arrives: helm ends
        assert second.wait(900) == 0, log.read_text()[-4000:]
        commands = _helm_commands(tmp_path)
        # helm cancels on SIGTERM and marks the install failed (pkg/cmd/install.go's
        # signal handler, pkg/action/install.go failRelease), then the upgrade --install
        # takes it over; had it died pending, the next run uninstalls first: either way
        # only after the first helm ended.
        assert commands in (["upgrade", "upgrade"], ["upgrade", "uninstall", "upgrade"])
        assert "rollback" not in commands
        releases = [(r["name"], r["status"], r["chart"]) for r in _releases(lab)]
        assert releases == [("gpu-operator", "deployed", "gpu-operator-v26.7.0")]
    finally:
        for pid in helms:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        lab.stop()


def _history(lab: ServedLab) -> list[dict]:
    result = subprocess.run(
        [str(lab.helm), "--kubeconfig", str(lab.kubeconfig), "history", "gpu-operator",
         "--namespace", "gpu-operator", "-o", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return json.loads(result.stdout or "[]")


def test_an_upgrade_killed_mid_way_is_rolled_back_to_the_last_deployed_revision(tmp_path):
    """pending-upgrade with the real helm: the wizard installed the release (revision 1), an
    operator changed a value by hand (revision 2, `helm upgrade --reuse-values --set`), then
    tried to put it back and timed out (revision 3 failed), the wizard's next upgrade
    (revision 4, putting the value back) is killed with helm in its --wait. The run after
    sees pending-upgrade, rolls back to revision 2, the last deployed, by number (not 3:
    helm rollback without one goes to current-1, which is the failed revision), then
    upgrades; never --force."""
    require_real()
    lab = ServedLab(tmp_path / "lab", "--fault", "greenfield")  # its node joined, no release
    state = str(tmp_path / "state")
    helms: list[int] = []
    try:
        # The install, by an earlier run of the wizard (a state folder of its own: this one's
        # checkpoint would call the phase done and plan nothing the next time).
        first = subprocess.run(_wizard(lab, str(tmp_path / "installed")), cwd=REPO,
                               capture_output=True, text=True, timeout=900)  # fmt: skip
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        changed = subprocess.run(
            [str(lab.helm), "--kubeconfig", str(lab.kubeconfig), "upgrade", "gpu-operator",
             "nvidia/gpu-operator", "--namespace", "gpu-operator", "--version", "v26.7.0",
             "--reuse-values", "--set", "nfd.enabled=false", "--wait", "--timeout", "5m"],
            capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert changed.returncode == 0, changed.stderr
        assert [(h["revision"], h["status"]) for h in _history(lab)] == [
            (1, "superseded"),
            (2, "deployed"),
        ]
        # Every node cordoned: the NFD master the wizard's upgrade brings back cannot be
        # scheduled, helm --wait waits.
        _cordon(lab, True)
        # The operator's own try to bring it back times out: revision 3 failed.
        failed = subprocess.run(
            [str(lab.helm), "--kubeconfig", str(lab.kubeconfig), "upgrade", "gpu-operator",
             "nvidia/gpu-operator", "--namespace", "gpu-operator", "--version", "v26.7.0",
             "--reuse-values", "--set", "nfd.enabled=true", "--wait", "--timeout", "1s"],
            capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert failed.returncode != 0, failed.stdout
        assert [(h["revision"], h["status"]) for h in _history(lab)] == [
            (1, "superseded"),
            (2, "deployed"),
            (3, "failed"),
        ]
        log = tmp_path / "killed.log"
        with log.open("w") as out:
            killed = subprocess.Popen(_wizard(lab, state), cwd=REPO, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 300
        status = None
        while time.monotonic() < deadline and status != "pending-upgrade":
            status = next(
                (r["status"] for r in _releases(lab) if r["name"] == "gpu-operator"), None
            )
            time.sleep(1)
        assert status == "pending-upgrade", log.read_text()[-4000:]
        helms = _processes_running(str(build.binary(HELM, "helm")))
        os.killpg(killed.pid, signal.SIGKILL)
        for pid in helms:
            os.kill(pid, signal.SIGKILL)
        killed.wait(30)
        assert helms, "the wizard's helm was not running"
        assert [(h["revision"], h["status"]) for h in _history(lab)][-1] == (4, "pending-upgrade")
        _cordon(lab, False)
        second = subprocess.run(_wizard(lab, state), cwd=REPO, capture_output=True, text=True,
                                timeout=900)  # fmt: skip
        out = second.stdout + second.stderr
        assert second.returncode == 0, out[-4000:]
        assert "gpu-operator/gpu-operator is pending-upgrade: this wizard's own" in out
        assert (
            "resolving it with `helm rollback gpu-operator 2 --namespace gpu-operator --wait`"
            in out
        )
        # The journal of the two runs: the killed upgrade, then the rollback and the upgrade.
        assert _helm_commands(tmp_path) == ["upgrade", "rollback", "upgrade"]
        journal = (tmp_path / "state" / "lab" / "journal.jsonl").read_text()
        assert "--force" not in journal
        history = _history(lab)
        assert [(h["revision"], h["status"]) for h in history][-2:] == [
            (5, "superseded"),
            (6, "deployed"),
        ]
        assert history[4]["description"] == "Rollback to 2"
        releases = [(r["name"], r["status"], r["chart"]) for r in _releases(lab)]
        assert releases == [("gpu-operator", "deployed", "gpu-operator-v26.7.0")]
    finally:
        for pid in helms:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        lab.stop()
