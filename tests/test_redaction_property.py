"""Redaction as a property (issue #18): unique tokens planted in every secret-bearing
input never appear in any byte the wizard prints or writes.

Planted: the registry username and password (environment variables the site names), the
S3 (warp) access and secret keys and the vLLM API key (typed into the benchmark commands,
as an operator would), the kubeconfig's bearer token, and the SSH key's passphrase (the
lab's key re-encrypted with it, the passphrase in the variable ssh.key_passphrase_env
names). Then `run --headless --verbose` (the whole plan against a served lab), `check`,
`check --json`, `status`, `export` and `report`, and `demo --headless --report` with the
same inputs planted in the demo's lab; every stdout, stderr and file they leave (state
folders, journals, checkpoints, export, reports, the xlsx's zipped members) is searched.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import asyncssh
import yaml

from tests.conftest import REPO, served_lab

ROLES = ("registry-user", "registry-pass", "warp-access", "warp-secret", "vllm-api-key",
         "kube-token", "ssh-passphrase")  # fmt: skip


def tokens() -> dict[str, str]:
    return {role: f"PLANTED{role.replace('-', '')}{secrets.token_hex(6)}" for role in ROLES}


def plant(directory: Path, site_path: Path, token: dict[str, str]) -> None:
    """Put the tokens into a lab's site file, key and kubeconfig (in place)."""
    site = yaml.safe_load(site_path.read_text())
    site["registry"].update(username_env="GNW_T_REG_USER", password_env="GNW_T_REG_PASS")
    site["ssh"]["key_passphrase_env"] = "GNW_T_SSH_PASSPHRASE"
    bench = site["measurements"]
    keys = f" --access-key={token['warp-access']} --secret-key {token['warp-secret']}"
    bench["aistor_tcp"]["command"] += keys
    bench["aistor_direct"]["command"] += keys
    bench["vllm"]["command"] += f" --api-key {token['vllm-api-key']}"
    site_path.write_text(yaml.safe_dump(site, sort_keys=False))
    key_path = directory / site["ssh"]["key"]
    key = asyncssh.read_private_key(str(key_path))
    key_path.write_bytes(key.export_private_key(passphrase=token["ssh-passphrase"], rounds=50))
    kubeconfig = directory / site["cluster"]["kubeconfig"]
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"][0]["user"]["token"] = token["kube-token"]
    kubeconfig.write_text(yaml.safe_dump(config))


def environment(token: dict[str, str], lab_bin: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(GNW_T_REG_USER=token["registry-user"], GNW_T_REG_PASS=token["registry-pass"],
               GNW_T_SSH_PASSPHRASE=token["ssh-passphrase"])  # fmt: skip
    if lab_bin is not None:
        env["PATH"] = f"{lab_bin}:{env['PATH']}"
    return env


# The demo builds its own lab: the same planting, applied as the lab writes its files.
DEMO = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from tests.test_redaction_property import plant
    from simulator import site_files
    token = json.loads(sys.argv[1])
    original = site_files.SiteFiles.write_site
    def write_site(self, key_path, helm):
        original(self, key_path, helm)
        plant(self.lab.directory, self.lab.site_path, token)
    site_files.SiteFiles.write_site = write_site
    from frontend.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


def every_byte(paths: list[Path]) -> dict[str, bytes]:
    """Every file under ``paths`` (zip members of xlsx files unpacked)."""
    found: dict[str, bytes] = {}
    for root in paths:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            found[str(path)] = data
            if data[:2] == b"PK":
                with zipfile.ZipFile(path) as archive:
                    for member in archive.namelist():
                        found[f"{path}!{member}"] = archive.read(member)
    return found


def leaks(token: dict[str, str], outputs: dict[str, bytes]) -> list[str]:
    return [
        f"{role} in {where}"
        for where, data in outputs.items()
        for role, value in token.items()
        if value.encode() in data
    ]


def test_no_planted_secret_is_printed_or_written(tmp_path):
    token = tokens()
    lab_dir = tmp_path / "lab"
    site = lab_dir / "site.yaml"
    state, export_dir, report_dir = tmp_path / "state", tmp_path / "export", tmp_path / "report"
    demo_state, demo_report = tmp_path / "demo-state", tmp_path / "demo-report"
    printed: dict[str, bytes] = {}

    def cli(*args: str, env) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run([sys.executable, "-m", "frontend.cli", *args], env=env,
                              cwd=REPO, capture_output=True, timeout=300, check=False)  # fmt: skip
        printed[f"{args[0]} stdout"] = done.stdout
        printed[f"{args[0]} {args[-1]} stderr"] = done.stderr
        return done

    with served_lab(site):
        plant(lab_dir, site, token)
        env = environment(token, lab_dir / "bin")
        demo = subprocess.Popen(
            [sys.executable, "-c", DEMO, json.dumps(token),
             "demo", "--headless", "--state-dir", str(demo_state), "--report", str(demo_report)],
            env=environment(token), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        run = cli("run", str(site), "--headless", "--verbose", "--yes",
                  "--maintenance-window-open", "--state-dir", str(state), env=env)  # fmt: skip
        demo_out, demo_err = demo.communicate(timeout=300)
        printed["demo stdout"], printed["demo stderr"] = demo_out, demo_err
        assert run.returncode == 0, run.stdout.decode()[-3000:] + run.stderr.decode()[-3000:]
        assert demo.returncode == 0, demo_out.decode()[-3000:] + demo_err.decode()[-3000:]
        for extra in ([], ["--json"]):
            assert (
                cli("check", str(site), "--state-dir", str(state), *extra, env=env).returncode == 0
            )
        assert cli("status", str(site), "--state-dir", str(state), env=env).returncode == 0
    assert cli("export", str(site), "--out", str(export_dir), env=env).returncode == 0
    assert cli("report", str(site), "--out", str(report_dir), "--state-dir", str(state),
               env=env).returncode == 0  # fmt: skip

    # The demo keeps its simulated site in the state directory (demo-lab: the lab's own
    # kubeconfig, site file and saved hosts, where the tokens were planted as inputs);
    # what the wizard wrote is everything else there.
    written = every_byte([state, export_dir, report_dir, demo_report])
    written.update({k: v for k, v in every_byte([demo_state]).items() if "/demo-lab/" not in k})
    everything = {**printed, **written}
    assert leaks(token, everything) == []

    # Not vacuous: the planted inputs were used, and their places show the redaction.
    journal = (state / "lab" / "journal.jsonl").read_text()
    assert "--secret-key ***REDACTED***" in journal and "--api-key ***REDACTED***" in journal
    verbose = run.stdout.decode()
    assert "warp get" in verbose and "--access-key=***REDACTED***" in verbose
    assert "--api-key ***REDACTED***" in (export_dir / "RUNBOOK.md").read_text()
    assert b"demo passed" in demo_out


def test_redaction_never_changes_an_artifact(tmp_path, monkeypatch):
    """Secrets stay out of artifacts by construction (environment references): with the
    registry mirror and credentials set, redacting changes no exported file but the
    runbook, which quotes the operator's benchmark commands, and every script still
    parses (`--src-creds "$SRC_CREDS"}` in copy-images.sh once lost its brace)."""
    from steps import build_plan
    from tests.conftest import MINIMAL_SITE
    from wizard.export import MANIFEST, export
    from wizard.redact import Redactor
    from wizard.site import load_site

    token = tokens()
    monkeypatch.setenv("GNW_T_REG_USER", token["registry-user"])
    monkeypatch.setenv("GNW_T_REG_PASS", token["registry-pass"])
    path = tmp_path / "site.yaml"
    path.write_text(
        MINIMAL_SITE + "registry: {mirror: nexus.lab:8443/m, pull_secret: nexus-pull,"
        " username_env: GNW_T_REG_USER, password_env: GNW_T_REG_PASS}\n"
        "measurements:\n  vllm:\n"
        f"    command: vllm bench serve --model m --api-key {token['vllm-api-key']}\n"
        "    metric_regex: 'tok/s: (?P<value>[0-9.]+)'\n"
    )
    site = load_site(path)
    export(site, build_plan(), tmp_path / "redacted")

    class Nothing(Redactor):
        def text(self, text: str) -> str:
            return text

    export(site, build_plan(), tmp_path / "plain", redactor=Nothing())

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    redacted, plain = files(tmp_path / "redacted"), files(tmp_path / "plain")
    changed = sorted(p for p in redacted if redacted[p] != plain[p] and p != MANIFEST)
    assert changed == ["RUNBOOK.md"]
    assert leaks(token, redacted) == []
    scripts = [p for p in redacted if p.endswith(".sh")]
    assert "cluster/mirror/copy-images.sh" in scripts
    assert b'--src-creds "$SRC_CREDS"}' in redacted["cluster/mirror/copy-images.sh"]
    for script in scripts:
        check = subprocess.run(["bash", "-n", str(tmp_path / "redacted" / script)],
                               capture_output=True, text=True, check=False)  # fmt: skip
        assert check.returncode == 0, f"{script}: {check.stderr}"
