"""The one redaction utility: known values and secret-looking text."""

from __future__ import annotations

import pytest

from wizard.redact import REDACTED, Redactor


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("helm registry login --password hunter2-long x", "hunter2-long"),
        ("skopeo copy --dest-creds admin:pa55word a b", "admin:pa55word"),
        ("    token: eyJhbGciOi.payload.sig", "eyJhbGciOi.payload.sig"),
        ("client-key-data: LS0tLS1CRUdJTg==", "LS0tLS1CRUdJTg=="),
        ("Authorization: Bearer abcdef123456", "abcdef123456"),
        ("curl -H Bearer\tabcdef123456", "abcdef123456"),
        ("Bearer\u00a0abcdef123456", "abcdef123456"),
        ("--token\nabcdef123456", "abcdef123456"),
        ("user=admin db_passwd=abcdef123456", "abcdef123456"),
        ("DB_PASSWORD=abcdef123456", "abcdef123456"),
        ("X-Api-Key: abcdef123456", "abcdef123456"),
        ("login --Token abcdef123456", "abcdef123456"),
        ("AUTHORIZATION: BEARER abcdef123456", "abcdef123456"),
        ("https://user:topsecret@nexus.lab/repo", "topsecret"),
        ('{"password": "quoted-secret"}', "quoted-secret"),
        ("NEXUS_PASSWORD=from-env-123", "from-env-123"),
    ],
)
def test_patterns_are_redacted(text, secret):
    redacted = Redactor().text(text)
    assert secret not in redacted and REDACTED in redacted


def test_private_key_blocks_are_redacted():
    text = (
        "x\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA\n-----END OPENSSH PRIVATE KEY-----\ny"
    )
    assert Redactor().text(text) == f"x\n{REDACTED}\ny"


def test_known_values_anywhere_and_in_nested_data():
    redactor = Redactor(["s3cr3t-value"])
    data = {"cmd": ["echo s3cr3t-value"], "nested": {"s3cr3t-value": ("a", "s3cr3t-value")}}
    assert "s3cr3t-value" not in repr(redactor.data(data))


def test_ordinary_output_is_left_alone():
    text = "driver: ice\nversion: 1.16.3\nGID index : 3\nlink irdma0/1 state ACTIVE"
    assert Redactor(["ok"]).text(text) == text  # too-short values are not secrets


def test_idempotent():
    once = Redactor().text("--password abcdef")
    assert Redactor().text(once) == once


def test_secret_names_in_manifests_are_not_mangled():
    text = "imagePullSecrets:\n  - name: nexus-pull\nimagePullSecrets: []\ntokenizer: bpe\n"
    assert Redactor().text(text) == text
