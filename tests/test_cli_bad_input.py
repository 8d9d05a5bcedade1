"""Every subcommand driven with bad arguments and bad files (issue #18): a clear message
naming what is wrong and exit 2, never a traceback or an "internal error" (exit 70).

Each case runs `frontend.cli.main([...])` in-process (capsys); the site files point at a
closed port on loopback, so a command that would connect fails fast and for the reason
under test (the bad file is read before any connection).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import asyncssh
import pytest

from frontend.cli import COMMANDS, main

SITE = """\
name: bad
ssh: {{key: {key}, known_hosts: {known_hosts}, config: none, connect_timeout: 2}}
cluster: {{kubeconfig: {kubeconfig}, helm: {helm}}}
nodes:
  - name: gpu-1
    host: 127.0.0.1
    ssh: {{port: 1}}
    bond: {{ports: [ens5f0np0, ens5f1np1]}}
    rdma_ip: 192.168.50.1
"""


class World:
    """A folder with a usable site file and the files it names; cases spoil one of them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.key = root / "id_ed25519"
        self.key.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
        self.key.chmod(0o600)
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text("")
        self.kubeconfig = root / "kubeconfig"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
            "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "current-context: x\n"
        )
        self.helm = root / "helm"
        self.helm.write_text("#!/bin/sh\necho v3.16.2\n")
        self.helm.chmod(0o755)
        self.state = root / "state"
        self.site = self.write_site()

    def write_site(self, name: str = "site.yaml", **override: str) -> Path:
        fields = {"key": self.key, "known_hosts": self.known_hosts,
                  "kubeconfig": self.kubeconfig, "helm": self.helm} | override  # fmt: skip
        path = self.root / name
        # JSON strings are YAML double-quoted scalars: "\u0000" is a real NUL byte.
        path.write_text(SITE.format(**{k: json.dumps(str(v)) for k, v in fields.items()}))
        return path


def spoil_known_hosts_folder(w: World) -> list[str]:
    w.known_hosts.unlink()
    w.known_hosts.mkdir()
    return ["check", str(w.site), "--state-dir", str(w.state)]


def spoil_known_hosts_binary(w: World) -> list[str]:
    w.known_hosts.write_bytes(b"\xff\xfe\x00\x01 binary \x00" * 64)
    return ["check", str(w.site), "--state-dir", str(w.state)]


def spoil_kubeconfig_binary(w: World) -> list[str]:
    w.kubeconfig.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    return ["check", str(w.site), "--state-dir", str(w.state)]


def spoil_key_missing(w: World) -> list[str]:
    w.key.unlink()
    return ["check", str(w.site), "--state-dir", str(w.state)]


def spoil_key_encrypted(w: World) -> list[str]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    w.key.write_bytes(key.export_private_key(passphrase="locked-here", rounds=50))
    return ["check", str(w.site), "--state-dir", str(w.state)]


def spoil_helm_not_executable(w: World) -> list[str]:
    w.helm.chmod(0o644)
    return ["check", str(w.site), "--state-dir", str(w.state)]


def site_fifo(w: World) -> list[str]:
    fifo = w.root / "fifo.yaml"
    os.mkfifo(fifo)
    return ["check", str(fifo)]


def field_with_nul(w: World) -> list[str]:
    return ["check", str(w.write_site("nul.yaml", key="id\0x"))]


def field_too_long(w: World) -> list[str]:
    return [
        "export",
        str(w.write_site("long.yaml", kubeconfig="k" * 5000)),
        "--out",
        str(w.root / "o"),
    ]


def state_dir_is_a_file(w: World) -> list[str]:
    (w.root / "a-file").write_text("x")
    return ["status", str(w.site), "--state-dir", str(w.root / "a-file")]


def report_out_is_a_file(w: World) -> list[str]:
    main(["status", str(w.site), "--state-dir", str(w.state)])  # no checkpoint yet: fine
    from wizard.checkpoint import Checkpoint
    from wizard.site import load_site

    with Checkpoint.open(w.state, load_site(w.site)):
        pass
    (w.root / "a-file").write_text("x")
    return ["report", str(w.site), "--out", str(w.root / "a-file"), "--state-dir", str(w.state)]


def report_out_under_a_file(w: World) -> list[str]:
    argv = report_out_is_a_file(w)
    argv[3] = str(w.root / "a-file" / "sub")
    return argv


def lab_write_site_under_a_file(w: World) -> list[str]:
    (w.root / "a-file").write_text("x")
    return ["lab", "--write-site", str(w.root / "a-file" / "site.yaml")]


# (id, argv or a function of the World that spoils something and returns argv, the
# words the message must have)
CASES = [
    ("demo --nodes 0", ["demo", "--headless", "--nodes", "0"], "--nodes 0"),
    ("demo --nodes 1001", ["demo", "--headless", "--nodes", "1001"], "1 to 1000"),
    ("demo --nodes -1 (tui)", ["demo", "--nodes", "-1"], "--nodes -1"),
    ("demo --fault nope", ["demo", "--headless", "--fault", "nope"], "nope"),
    (
        "demo --report at a file",
        lambda w: ["demo", "--headless", "--report", str(w.site)],
        "--report",
    ),
    (
        "lab --nodes 1001",
        lambda w: ["lab", "--write-site", str(w.root / "l.yaml"), "--nodes", "1001"],
        "1 to 1000",
    ),
    (
        "lab --nodes 0",
        lambda w: ["lab", "--write-site", str(w.root / "l.yaml"), "--nodes", "0"],
        "1 to 1000",
    ),
    ("lab without --write-site", ["lab"], "--write-site"),
    ("lab --write-site under a file", lab_write_site_under_a_file, "is a file, not a folder"),
    (
        "lab --fault nope",
        lambda w: ["lab", "--write-site", str(w.root / "l.yaml"), "--fault", "nope"],
        "nope",
    ),
    ("report --out at a file", report_out_is_a_file, "is a file, not a folder"),
    ("report --out under a file", report_out_under_a_file, "a file is in the way"),
    (
        "report --compare missing",
        lambda w: [
            *report_out_is_a_file(w)[:3],
            str(w.root / "r"),
            "--state-dir",
            str(w.state),
            "--compare",
            str(w.root / "nope.json"),
        ],
        "compare",
    ),
    (
        "report without a checkpoint",
        lambda w: ["report", str(w.site), "--out", str(w.root / "r"), "--state-dir", str(w.state)],
        "no checkpoint",
    ),
    ("NUL in the site path", ["check", "site\0.yaml"], "NUL"),
    ("NUL in --out", lambda w: ["export", str(w.site), "--out", "o\0ut"], "NUL"),
    ("NUL in --state-dir", lambda w: ["status", str(w.site), "--state-dir", "s\0"], "NUL"),
    ("over-long site path", ["check", "s" * 5000], "too long"),
    ("over-long --out", lambda w: ["export", str(w.site), "--out", "o" * 5000], "too long"),
    ("NUL in a path field", field_with_nul, "ssh.key: 'id\\x00x' is not a valid path"),
    ("over-long path field", field_too_long, "cluster.kubeconfig: 'kkkk"),
    ("missing site file", ["check", "/nonexistent/site.yaml"], "does not exist"),
    ("site file is a folder", lambda w: ["run", str(w.root), "--headless"], "a folder"),
    ("site file is a FIFO", site_fifo, "not a regular file"),
    (
        "site file is /dev/zero",
        ["export", "/dev/zero", "--out", "/tmp/never"],
        "not a regular file",
    ),
    ("known_hosts is a folder", spoil_known_hosts_folder, "(ssh.known_hosts) cannot be used"),
    ("known_hosts is binary", spoil_known_hosts_binary, "(ssh.known_hosts) cannot be used"),
    ("kubeconfig is binary", spoil_kubeconfig_binary, "is not text"),
    ("ssh.key missing", spoil_key_missing, "does not exist"),
    ("ssh.key locked, no agent, no terminal", spoil_key_encrypted, "protected by a passphrase"),
    ("helm not executable", spoil_helm_not_executable, "cluster.helm) is not executable"),
    ("state dir is a file", state_dir_is_a_file, "cannot read checkpoint"),
    ("init at a folder", lambda w: ["init", str(w.root), "--force"], "cannot write"),
    ("init NUL", ["init", "x\0.yaml"], "NUL"),
    (
        "export --out is a file",
        lambda w: ["export", str(w.site), "--out", str(w.site)],
        "not a folder",
    ),
    (
        "run --phase nope",
        lambda w: ["run", str(w.site), "--headless", "--phase", "nope"],
        "no phase",
    ),
    ("run --step nope", lambda w: ["run", str(w.site), "--headless", "--step", "nope"], "no step"),
    (
        "run --waive without reason",
        lambda w: ["run", str(w.site), "--headless", "--waive", "T11.acs"],
        "REASON",
    ),
    ("parse unknown kind", ["parse", "nope", "-"], "unknown kind"),
    ("parse a folder", lambda w: ["parse", "lsmod", str(w.root)], "cannot read"),
    ("parse NUL", ["parse", "lsmod", "a\0b"], "NUL"),
    ("parse without a file", ["parse", "lsmod"], "usage"),
    ("schema --out a folder", lambda w: ["schema", "--out", str(w.root)], "is a folder"),
    (
        "schema --out under a file",
        lambda w: ["schema", "--out", str(w.site / "x.json")],
        "cannot write",
    ),
]


def test_every_subcommand_has_bad_input_cases(tmp_path):
    covered = set()
    for i, (_, argv, _) in enumerate(CASES):
        if callable(argv):
            (tmp_path / str(i)).mkdir()
            argv = argv(World(tmp_path / str(i)))
        covered.add(argv[0])
    assert covered == set(COMMANDS)


@pytest.mark.parametrize(("case", "argv", "says"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_exit_2_with_a_clear_message(tmp_path, capsys, monkeypatch, case, argv, says):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # crash files, if any
    world = World(tmp_path)
    if callable(argv):
        argv = argv(world)
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in out + err, out + err
    assert code == 2, (code, out[-2000:], err[-2000:])
    assert says.lower() in (out + err).lower(), (out[-2000:], err[-2000:])


def test_a_closed_stdout_is_not_a_failed_step(tmp_path):
    """`run ... --headless | head -4` recorded "internal error" on the step being printed
    (BrokenPipeError in the front end); the reader leaving is not the step failing."""
    import subprocess
    import sys

    from tests.conftest import REPO, served_lab
    from wizard.checkpoint import read_state, site_state_dir
    from wizard.site import load_site

    site = tmp_path / "site.yaml"
    state = tmp_path / "state"
    with served_lab(site):
        run = subprocess.Popen(
            [sys.executable, "-m", "frontend.cli", "run", str(site), "--headless", "--yes",
             "--phase", "preflight", "--state-dir", str(state)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
        )  # fmt: skip
        assert run.stdout is not None
        run.stdout.readline()
        run.stdout.close()  # the reader is gone, as `| head -1` leaves
        _, err = run.communicate(timeout=120)
    assert b"Traceback" not in err
    recorded = read_state(site_state_dir(state, load_site(site)))["steps"]
    errors = [
        (step, target)
        for step, targets in recorded.items()
        for target, record in targets.items()
        if record.get("message") == "internal error"
    ]
    assert errors == []
