"""Every secret a run handles is known to the redactor (wizard/secrets.py), and the
redactor covers the credential flags of the benchmark tools (issue #18)."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import MINIMAL_SITE
from wizard.events import StepFinished
from wizard.model import Evidence, Finding, Severity, StepState
from wizard.redact import REDACTED, Redactor
from wizard.secrets import command_secrets, kubeconfig_secrets
from wizard.site import parse_site


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("warp get --host=a --access-key=AKIAEXAMPLE1 --duration=1s", "AKIAEXAMPLE1"),
        ("warp get --secret-key s3cr3t-value --host a", "s3cr3t-value"),
        ("vllm bench serve --model m --api-key sk-abcdef123", "sk-abcdef123"),
        ("WARP_SECRET_KEY=s3cr3t-value warp get", "s3cr3t-value"),
        ("export ACCESS_KEY=AKIAEXAMPLE1", "AKIAEXAMPLE1"),
    ],
)
def test_benchmark_credential_flags_are_redacted(text, secret):
    out = Redactor().text(text)
    assert secret not in out and REDACTED in out


def test_a_variable_reference_is_never_rewritten():
    for text in (
        '--secret-key "$WARP_SECRET_KEY"',
        "--api-key=${KEY}",
        '--src-creds "$SRC_CREDS"}',
    ):
        assert Redactor().text(text) == text


def test_command_secrets_finds_values_after_flags_not_references():
    command = "warp get --access-key=AK123456 --secret-key 'SK 1234' --api-key \"$KEY\" --x y"
    assert command_secrets(command) == ["AK123456", "SK 1234"]
    assert command_secrets("vllm --api-key") == []
    assert command_secrets("unbalanced 'quote --api-key abcd1234") == ["abcd1234"]


def test_kubeconfig_credentials_are_collected(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({"users": [
        {"name": "a", "user": {"token": "tok-123456"}},
        {"name": "b", "user": {"client-key-data": "S0VZREFUQQ==", "username": "admin"}},
        {"name": "c", "user": {"auth-provider": {"config": {"id-token": "idt-123456"}}}},
    ]}))  # fmt: skip
    assert kubeconfig_secrets(path) == ["tok-123456", "S0VZREFUQQ==", "idt-123456"]
    path.write_bytes(b"\x00\xff binary")
    assert kubeconfig_secrets(path) == []
    assert kubeconfig_secrets(tmp_path) == []


def test_the_site_knows_every_secret_it_names(tmp_path, monkeypatch):
    monkeypatch.setenv("GNW_T_USER", "registry-user-1")
    monkeypatch.setenv("GNW_T_PASS", "registry-pass-1")
    monkeypatch.setenv("GNW_T_PP", "passphrase-1")
    (tmp_path / "kubeconfig").write_text("users: [{name: a, user: {token: kube-token-1}}]\n")
    site = parse_site(
        MINIMAL_SITE
        + "registry: {username_env: GNW_T_USER, password_env: GNW_T_PASS}\n"
        + "ssh: {key_passphrase_env: GNW_T_PP}\n"
        + f"cluster: {{kubeconfig: {tmp_path / 'kubeconfig'}}}\n"
        + "measurements:\n  vllm: {command: 'vllm bench --api-key api-key-1', "
        + "metric_regex: '(?P<value>[0-9]+)'}\n"
    )
    assert set(site.secret_values()) == {
        "registry-user-1", "registry-pass-1", "passphrase-1", "kube-token-1", "api-key-1"
    }  # fmt: skip


def test_events_are_redacted_whole_and_keep_their_types():
    redactor = Redactor(["the-secret-1"])
    finding = Finding("T15.vllm", "T15", Severity.FAIL, "ran with the-secret-1",
                      evidence=(Evidence("vllm --api-key the-secret-1", "x"),))  # fmt: skip
    event = StepFinished("operate.vllm", "gpu-1", StepState.FAILED, "the-secret-1", (finding,))
    out = redactor.value(event)
    assert isinstance(out, StepFinished) and out.state is StepState.FAILED
    assert "the-secret-1" not in repr(out)
    assert isinstance(out.findings, tuple) and out.findings[0].severity is Severity.FAIL
    clean = StepFinished("s", "t", StepState.DONE)
    assert redactor.value(clean) is clean  # nothing to replace: the same object
