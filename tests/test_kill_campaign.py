"""The kill campaign: the headless run is killed right after each distinct change a 2-node
lab receives (the effect happened, the wizard never saw its answer), resumed each time,
to the end. Then: the run completed; every change the hosts and the cluster received has
a journal intent written before it; no non-idempotent change ran twice; bond, cordon and
QoS end correct on both nodes.

The lab runs in its own process (``gpu-node-wizard lab --record-effects --kill-on-effect``)
and does the killing itself, before it answers (simulator/effects.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import yaml

from tests.conftest import REPO
from wizard.checkpoint import read_journal

RUN_BUDGET_S = 420  # the whole campaign; one uninterrupted run takes about 45 s
SUDO = "sudo -n -- "


def _lab(site: Path, effects: Path, control: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "frontend.cli", "lab", "--write-site", str(site), "--nodes", "2",
            "--record-effects", str(effects), "--kill-on-effect", str(control)]  # fmt: skip
    lab = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=REPO)
    for line in lab.stdout:
        if line.startswith("try:"):
            return lab
    raise RuntimeError("the lab did not start")


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _journal(state: Path) -> list[dict]:
    return read_journal(state / "lab")[0]  # a line torn by a kill is reported and skipped


def test_kill_after_each_distinct_change_then_resume_to_the_end(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    effects, control, state = tmp_path / "effects.jsonl", tmp_path / "kill.json", tmp_path / "state"
    control.write_text(json.dumps({"pid": None, "killed_on": []}))
    lab = _lab(site, effects, control)
    run = [sys.executable, "-m", "frontend.cli", "run", str(site), "--headless", "--yes",
           "--maintenance-window-open", "--state-dir", str(state)]  # fmt: skip
    kills, outputs = 0, []
    deadline = time.monotonic() + RUN_BUDGET_S
    try:
        while time.monotonic() < deadline:
            wizard = subprocess.Popen(
                run, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            data = json.loads(control.read_text())
            data["pid"] = wizard.pid
            control.write_text(json.dumps(data))
            out, _ = wizard.communicate(timeout=max(deadline - time.monotonic(), 1))
            outputs.append(out)
            if wizard.returncode != -9:
                break
            kills += 1
        server = yaml.safe_load((site.parent / "kubeconfig").read_text())["clusters"][0]
        base = server["cluster"]["server"]
        hosts = json.loads(urllib.request.urlopen(f"{base}/lab/v1/hosts", timeout=10).read())
        nodes = json.loads(urllib.request.urlopen(f"{base}/api/v1/nodes", timeout=10).read())
    finally:
        lab.terminate()
        lab.wait(timeout=10)

    assert wizard.returncode == 0, outputs[-1][-3000:]
    killed_on = json.loads(control.read_text())["killed_on"]
    print(f"{kills} kills:", *killed_on, sep="\n  ")
    assert kills == len(killed_on) and kills >= 25, (kills, killed_on)
    # The QoS change was killed in the middle (after a port's DSCP entry, before the rejoin)
    # and still ended right.
    assert any(k.startswith(("dcb app add", SUDO + "dcb app add")) for k in killed_on)
    assert any(k.startswith("nmcli connection up") for k in killed_on)  # the rejoin (RHEL: NM)

    # Every change the lab received has an intent in the journal.
    journal = _journal(state)
    intents = Counter()
    for entry in journal:
        if "intent" not in entry:
            continue
        if "api" in entry:
            intents[("cluster", entry["api"])] += 1
        elif "command" in entry:
            intents[(entry.get("target") or entry["for"], entry["command"])] += 1
    received = Counter()
    for effect in _lines(effects):
        what = effect["what"].removeprefix(SUDO)
        received[(effect["where"], what)] += 1
    missing = [key for key, count in received.items() if intents[key] < count]
    assert not missing, missing[:10]

    # No non-idempotent change ran twice: a DSCP entry is never added over itself, and each
    # node rebooted once.
    for host in ("gpu-b300-01", "gpu-b300-02"):
        sequence = [e["what"].removeprefix(SUDO) for e in _lines(effects) if e["where"] == host]
        present: set[str] = set()
        for command in sequence:
            words = command.split()
            if words[:3] == ["dcb", "app", "add"]:
                key = " ".join(words[3:])
                assert key not in present, f"{host}: `{command}` added an entry that existed"
                present.add(key)
            elif words[:3] == ["dcb", "app", "del"]:
                present.discard(" ".join(words[3:]))
            elif command == "systemctl reboot":
                present.clear()  # DCB state is lost at boot; the unit adds it again
        assert sequence.count("systemctl reboot") == 1, host

    # The end state, read from the lab: both ports in bond1 and up, identical QoS, the ToS,
    # every node schedulable.
    for name in ("gpu-b300-01", "gpu-b300-02"):
        ports = hosts[name]["ports"]
        assert all(p["enslaved"] and p["admin_up"] for p in ports.values()), ports
        assert all(p["pfc"] == [3] and p["app"] == [[24, 3]] and not p["lldp_agent"]
                   for p in ports.values()), ports  # fmt: skip
        assert "96" in "".join(hosts[name]["configfs"].values())
    for node in nodes["items"]:
        assert not node["spec"].get("unschedulable"), node["metadata"]["name"]
