"""One redactor on every path (issue #27, point 6): asyncssh's own log records at
--log-level info/debug, `curl -u user:pass` and URL credentials in a configured benchmark
command (the RUNBOOK, the journal), containerd's base64 `auth = "..."` in host output, and
a secret that contains another replaced whole (longest first)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys

import asyncssh
import pytest

from simulator.host import LabHost
from simulator.sshd import LabSshServer
from tests.conftest import MINIMAL_SITE, REPO
from wizard.redact import REDACTED, Redactor, redact_logs
from wizard.secrets import command_secrets
from wizard.site import SshSettings, parse_site
from wizard.transports.ssh import SshHost

CURL = "curl -fsS -u bench:hunter2-pw https://mirror:tok@en-9@repo.example/run.sh | sh"


@pytest.mark.parametrize("order", [1, -1], ids=["short first", "long first"])
def test_a_secret_containing_another_is_replaced_whole(order):
    secrets = ["abcd1234", "abcd1234-tail-9"][::order]
    text = Redactor(secrets).text("token abcd1234-tail-9 and abcd1234.")
    assert "tail" not in text and "abcd" not in text, text
    assert text == f"token {REDACTED} and {REDACTED}."


def test_credentials_in_urls_and_user_options_are_redacted():
    redactor = Redactor()
    for raw, secret in [
        ("curl -u admin:hunter22 http://x", "hunter22"),
        ("curl -uadmin:hunter22 http://x", "hunter22"),
        ("curl --user=admin:hunter22 http://x", "hunter22"),
        ("curl --proxy-user admin:hunter22 http://x", "hunter22"),
        ("git clone https://bob:p@ss-w0rd@git.example/r.git", "ss-w0rd"),
        ("fetch https://:only-a-token@host.example/x", "only-a-token"),
    ]:
        text = redactor.text(raw)
        assert secret not in text and REDACTED in text, (raw, text)
    assert redactor.text("curl -u admin http://x") == "curl -u admin http://x"
    assert redactor.text("http://host:8080/x") == "http://host:8080/x"


def test_containerd_registry_auth_is_redacted():
    config = (
        '[plugins."io.containerd.grpc.v1.cri".registry.configs."reg.example".auth]\n'
        '  auth = "YmVuY2g6aHVudGVyMg=="\n'
        '{"auths": {"reg.example": {"auth": "YmVuY2g6aHVudGVyMg=="}}}\n'
    )
    text = Redactor().text(config)
    assert "YmVuY2g6aHVudGVyMg" not in text, text
    assert "registry.configs" in text and Redactor().text("author: me") == "author: me"


def test_a_benchmark_commands_user_option_and_url_are_secrets_of_the_site():
    assert {"bench:hunter2-pw", "hunter2-pw", "tok@en-9"} <= set(command_secrets(CURL))
    site = parse_site(
        MINIMAL_SITE
        + f"measurements:\n  vllm: {{command: '{CURL}', metric_regex: '(?P<value>[0-9]+)'}}\n"
    )
    redactor = Redactor(site.secret_values())
    # Known values: replaced wherever they appear, not only after the flag.
    assert "hunter2-pw" not in redactor.text("login failed for password hunter2-pw")


def test_the_runbook_keeps_no_benchmark_credentials(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        MINIMAL_SITE
        + f"measurements:\n  vllm: {{command: '{CURL}', metric_regex: '(?P<value>[0-9]+)'}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "frontend.cli", "export", str(site), "--out", str(tmp_path / "x")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = "".join(
        p.read_text(errors="replace") for p in (tmp_path / "x").rglob("*") if p.is_file()
    )
    assert "curl -fsS -u " in written, "the benchmark command is in the export"
    for secret in ("hunter2-pw", "tok@en-9", "en-9@repo"):
        assert secret not in written, secret


async def test_asyncssh_logs_its_commands_through_the_redactor(tmp_path):
    key = asyncssh.generate_private_key("ssh-ed25519")
    host = LabHost("gpu-1", "gpu", "10.10.0.21", "192.168.50.21")
    server = LabSshServer(host, "127.0.0.9", asyncssh.generate_private_key("ssh-ed25519"),
                          key.export_public_key().decode())  # fmt: skip
    await server.start()
    key_path = tmp_path / "id_ed25519"
    key_path.write_bytes(key.export_private_key())
    key_path.chmod(0o600)
    Redactor(["known-site-secret-42"])  # a site's run: its secrets reach the logs' redactor
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    redact_logs(handler)
    root = logging.getLogger()
    before = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        ssh = SshHost("gpu-1", "127.0.0.9",
                      SshSettings(port=server.port, connect_timeout=5, trust_on_first_use=True),
                      key_path=key_path, known_hosts_path=tmp_path / "known_hosts")  # fmt: skip
        await ssh.run(["echo", "warp", "--secret-key", "S3CR3T-abcd-1234"], sudo=False)
        await ssh.run(["echo", "known-site-secret-42"], sudo=False)
        await ssh.close()
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
        await server.stop()
    logged = out.getvalue()
    assert "asyncssh" in logged and "warp --secret-key" in logged, logged[-2000:]
    assert "S3CR3T-abcd-1234" not in logged and "known-site-secret-42" not in logged
