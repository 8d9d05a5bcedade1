"""Redaction leaks found by the reliability review (issue #27 follow-up): each command
or line below carries a secret that must not survive the redactor."""

from __future__ import annotations

import base64

import pytest

from wizard.redact import Redactor
from wizard.secrets import command_secrets

LEAKS = {
    "Authorization Basic": ("curl -H 'Authorization: Basic YWRtaW46UzNjcjN0' https://x", "YWRtaW46UzNjcjN0"),
    "Authorization Token": ('curl -H "Authorization: Token 9f8e7d6c5b4a39281706" https://x', "9f8e7d6c5b4a39281706"),
    "URL token userinfo": ("git clone https://ghp_abcdEFGHijklMNOP1234@github.com/x.git", "ghp_abcdEFGHijklMNOP1234"),
    "-u quoted space": ("curl -u 'admin:S3cr 3t' https://x", "3t"),
    "--secret-key quoted space": ("warp get --secret-key 'abc def ghi'", "def ghi"),
    "--password quoted space": ('helm --password "S3cr3t plain" x', "plain"),
    "$ in user": ("curl -u 'ad$min:S3cr3tPW' https://x", "S3cr3tPW"),
    "docker login -p": ("docker login -p S3cr3tPW -u admin r.io", "S3cr3tPW"),
    "sshpass -p": ("sshpass -p S3cr3tPW ssh root@h", "S3cr3tPW"),
    "--certificate-key": ("kubeadm init phase upload-certs --certificate-key 0f1e2d3c4b5a69788796", "0f1e2d3c4b5a69788796"),
    "ansible_become_pass": ("ansible_become_pass=S3cr3tPW", "S3cr3tPW"),
    "ansible_ssh_pass": ("ansible_ssh_pass: S3cr3tPW", "S3cr3tPW"),
}  # fmt: skip


@pytest.mark.parametrize("line, secret", LEAKS.values(), ids=LEAKS.keys())
def test_the_pattern_redacts_it(line, secret):
    out = Redactor().text(line)
    assert secret not in out, out


@pytest.mark.parametrize(
    "command, secret",
    [
        ("docker login -p S3cr3tPW -u admin r.io", "S3cr3tPW"),
        ("sshpass -p S3cr3tPW ssh root@h", "S3cr3tPW"),
        ("kubeadm init --certificate-key 0f1e2d3c4b5a69788796", "0f1e2d3c4b5a69788796"),
        ("curl -u 'ad$min:S3cr3tPW' https://x", "S3cr3tPW"),
    ],
)
def test_command_secrets_learns_it(command, secret):
    assert secret in command_secrets(command)


def test_the_base64_of_a_known_secret_and_of_user_colon_secret_is_redacted():
    redactor = Redactor(["admin:hunter2pass", "hunter2pass"])  # as command_secrets gives
    for value in ("admin:hunter2pass", "hunter2pass"):
        encoded = base64.b64encode(value.encode()).decode()
        assert encoded not in redactor.text(f"auth blob {encoded} end"), value
    learned = Redactor()
    for value in command_secrets("curl -u admin:hunter2pass https://x"):
        learned.add(value)
    encoded = base64.b64encode(b"admin:hunter2pass").decode()
    assert encoded not in learned.text(f"x {encoded} y")


def test_ordinary_text_is_left_alone():
    for line in ("ssh://git@github.com/x", "Token expired", "tar -uf a:b", "imagePullSecrets:"):
        assert Redactor().text(line) == line, line
