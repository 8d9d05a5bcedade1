"""The signal campaign (issue #27, points 10 and 2): the headless run is stopped by SIGTERM,
SIGHUP and SIGINT in turn right after each distinct change of a maintenance change a lab
node receives (QoS on the ports, the bond's rejoin, cordon and uncordon, the reboot), and
resumed each time to the end. Every stop says which nodes are out of service and what
resumes; a fresh `check` afterwards passes; the node is schedulable and rebooted once.

The lab runs in its own process and sends the signal itself, before it answers
(simulator/effects.py, the control file's ``signal`` and ``only``), so the lab lives on
across the wizard's stops.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from tests.conftest import REPO

RUN_BUDGET_S = 300
SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")
# What a maintenance change sends: DSCP/PFC, the bond's ports, the node object, the reboot.
MAINTENANCE = ["dcb ", "nmcli ", "ip link set", "/api/v1/nodes/", "systemctl reboot"]


def _lab(site: Path, effects: Path, control: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "frontend.cli", "lab", "--write-site", str(site), "--nodes", "1",
            "--record-effects", str(effects), "--kill-on-effect", str(control)]  # fmt: skip
    lab = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=REPO)
    for line in lab.stdout:
        if line.startswith("try:"):
            return lab
    raise RuntimeError("the lab did not start")


def test_a_signal_at_each_entry_of_a_maintenance_change_then_resume(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    effects, control, state = tmp_path / "effects.jsonl", tmp_path / "kill.json", tmp_path / "state"
    control.write_text(json.dumps({"pid": None, "killed_on": [], "only": MAINTENANCE}))
    lab = _lab(site, effects, control)
    run = [sys.executable, "-m", "frontend.cli", "run", str(site), "--headless", "--yes",
           "--maintenance-window-open", "--state-dir", str(state)]  # fmt: skip
    stops: list[tuple[str, str]] = []
    deadline = time.monotonic() + RUN_BUDGET_S
    try:
        while time.monotonic() < deadline:
            sig = SIGNALS[len(stops) % len(SIGNALS)]
            wizard = subprocess.Popen(run, cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)  # fmt: skip
            data = json.loads(control.read_text())
            data.update(pid=wizard.pid, signal=sig)
            control.write_text(json.dumps(data))
            out, err = wizard.communicate(timeout=max(deadline - time.monotonic(), 1))
            if wizard.returncode != 130:
                break
            stops.append((sig, err))
        check = subprocess.run(
            [sys.executable, "-m", "frontend.cli", "check", str(site), "--state-dir", str(state)],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        base = yaml.safe_load((site.parent / "kubeconfig").read_text())["clusters"][0]["cluster"]
        nodes = json.loads(
            urllib.request.urlopen(f"{base['server']}/api/v1/nodes", timeout=10).read()
        )
    finally:
        lab.terminate()
        lab.wait(timeout=10)

    assert wizard.returncode == 0, (out + err)[-3000:]
    killed_on = json.loads(control.read_text())["killed_on"]
    print(f"{len(stops)} stops:", *killed_on, sep="\n  ")
    assert len(stops) == len(killed_on) >= 6, killed_on
    assert any("dcb" in k for k in killed_on) and any("systemctl reboot" in k for k in killed_on)
    for sig, err in stops:
        assert "Traceback" not in err and "this is a bug" not in err, err
        how = "SIGINT (Ctrl-C)" if sig == "SIGINT" else sig
        assert f"interrupted by {how}" in err, err
        # Every stop says where the nodes stand and what resumes.
        assert "out of service now:" in err or "no node is out of service" in err, err
        assert f"gpu-node-wizard run {site} --state-dir {state}" in err, err
    # At least one stop landed mid-change, and said so.
    assert any("gpu-b300-01: mid-change in" in err for _, err in stops), stops
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    reboots = [e for e in map(json.loads, effects.read_text().splitlines())
               if e["what"].endswith("systemctl reboot")]  # fmt: skip
    assert len(reboots) == 1, reboots
    for node in nodes["items"]:
        assert not node["spec"].get("unschedulable"), node["metadata"]["name"]
