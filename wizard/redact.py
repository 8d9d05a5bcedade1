"""One redaction utility for everything the wizard writes: journal, checkpoint, export.

Secrets reach the wizard two ways: as values it knows (a registry password read from the
environment variable the site names) and as text inside command output (a kubeconfig
token, a ``--password`` argument, a private key block). Both are replaced by
``REDACTED`` before anything is written to disk or shown in a log.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import re
from collections.abc import Iterable
from enum import Enum
from typing import Any, TypeVar

T = TypeVar("T")

REDACTED = "***REDACTED***"

# Values shorter than this are not treated as secrets: redacting "1" or "ok" everywhere
# would destroy the evidence the checks rely on.
MIN_SECRET_LENGTH = 4

_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
    re.DOTALL,
)
# key: value / key=value where the key names a secret (kubeconfig, env dumps, helm output).
# The key must *end* with the secret word (``token:``, ``db_password=``), so that names such
# as ``imagePullSecrets`` or ``tokenizer`` are left alone; the value is on the same line and
# is not YAML/JSON structure (``[]``, ``{``, a list item).
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<key>\b[\w.-]*(?:password|passwd|secret|token|api[_-]?key|client-key-data|auth"
    r"|private[_-]?key|secret[_-]?key|access[_-]?key|passphrase|_pass)[\"']?[ \t]*[:=][ \t]*)"
    r"(?P<value>[\"']?[^\s\"',}\[\]{]+[\"']?)",
    re.IGNORECASE,
)
# Command-line flags that carry credentials (helm, skopeo, docker login, curl; MinIO warp's
# --access-key/--secret-key, per its README "Configuration"; vLLM's --api-key).
SECRET_FLAGS = (
    "password", "passwd", "token", "creds", "src-creds", "dest-creds", "client-secret",
    "secret-key", "access-key", "api-key", "passphrase", "certificate-key",
)  # fmt: skip
_SECRET_FLAG = re.compile(
    rf"(?P<key>--(?:{'|'.join(SECRET_FLAGS)})(?:=|\s+))(?P<value>\"[^\"]*\"|'[^']*'|\S+)",
    re.IGNORECASE,
)
# Words that every match of the pattern above contains (lower case), for a cheap pre-test.
_FLAG_WORDS = ("--pass", "--token", "creds", "--client-secret", "-key")
# "auth": containerd's registry `auth = "<base64 user:password>"` (CRI plugin docs,
# registry.configs.<host>.auth), docker's config.json "auth".
_ASSIGNMENT_WORDS = ("passw", "secret", "token", "key", "passphrase", "auth", "_pass")
_BEARER = re.compile(r"(?P<key>\bBearer\s+)(?P<value>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE)
# An HTTP Authorization header of any scheme (RFC 9110 section 11.6.2): Basic (base64
# user:password), Token (GitLab, Django REST), Digest...
_AUTH_HEADER = re.compile(
    r"(?P<key>\b(?:proxy-)?authorization:[ \t]*(?:[A-Za-z-]+[ \t]+)?)(?P<value>[^\s\"']+)",
    re.IGNORECASE,
)
# scheme://TOKEN@host: userinfo without a colon long enough to be a token (a GitHub or
# GitLab access token as the user); a short user name (git@, alice@) is kept.
_URL_TOKEN = re.compile(
    r"(?P<key>[a-z][a-z0-9+.-]*://)(?P<value>[^/\s:@\"']{16,})(?=@[^@\s/]+)", re.IGNORECASE
)
# The password flags of docker/podman/nerdctl login (-p) and sshpass -p (their --help).
_P_FLAG = re.compile(
    r"(?P<key>\b(?:(?:docker|podman|nerdctl)[ \t]+login\b[^\n|;&]*?[ \t]-p|sshpass[ \t]+-p)"
    r"[ \t]*)(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"']+)"
)
# scheme://user:password@host: the password runs to the *last* @ before the host (a
# password may hold an @ itself; its tail must not stay behind).
_URL_CREDENTIALS = re.compile(
    r"(?P<key>[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<value>[^\s/]+)(?=@[^@\s/]+(?:[/:\s\"']|$))",
    re.IGNORECASE,
)
# curl's -u/--user and --proxy-user user:password (curl(1)); also -U (--proxy-user) and
# `-uuser:pass` written together. A bare user (curl asks for the password) holds none.
_USER_FLAG = re.compile(
    r"(?P<key>(?<![\w-])(?:-[uU][ \t]*|--(?:proxy-)?user(?:=|[ \t]+))[\"']?[^\s:\"']*:)"
    r"(?P<value>[^\s\"']+)"
)
# The same, quoted: the password runs to the closing quote (spaces and all).
_QUOTED_USER_FLAG = re.compile(
    r"(?P<key>(?<![\w-])(?:-[uU][ \t]*|--(?:proxy-)?user(?:=|[ \t]+))(?P<q>[\"'])[^:\"']*:)"
    r"(?P<value>[^\"']*)(?=(?P=q))"
)


class Redactor:
    """Replaces known secret values and secret-looking patterns in text and data."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        for value in secrets:
            self.add(value)

    def add(self, value: str | None) -> None:
        """Remember a secret value so that it never appears in anything written (the
        process's logs included: LOG_REDACTOR learns it too)."""
        if value and len(value) >= MIN_SECRET_LENGTH:
            # Its base64 too: a Basic header, a docker config "auth" or a Secret's data
            # carry base64(user:secret) (a user:secret pair is learned whole, see
            # wizard/secrets.py), and base64(secret) alone.
            encoded = base64.b64encode(value.encode()).decode()
            for each in (value, encoded, encoded.rstrip("=")):
                self._secrets.add(each)
                if self is not LOG_REDACTOR:
                    LOG_REDACTOR.add(each)

    def text(self, text: str) -> str:
        """Return ``text`` with every known secret and secret-looking value replaced."""
        if not text:
            return text
        # Longest first, so that a secret containing another is replaced whole.
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        # Each pattern runs only when the text holds words every match needs (substring
        # tests at C speed): most of what is written (names, states, probe output) holds
        # none, and a fleet run redacts tens of thousands of strings.
        if "PRIVATE KEY-----" in text:
            text = _PRIVATE_KEY_BLOCK.sub(REDACTED, text)
        lower = text.lower()
        if "--" in text and any(word in lower for word in _FLAG_WORDS):
            text = _SECRET_FLAG.sub(_keep_key, text)
        if ("=" in text or ":" in text) and any(word in lower for word in _ASSIGNMENT_WORDS):
            text = _SECRET_ASSIGNMENT.sub(_keep_key, text)
        if "bearer" in lower:
            text = _BEARER.sub(_keep_key, text)
        if "authorization" in lower:
            text = _AUTH_HEADER.sub(_keep_key, text)
        if " -p" in text:
            text = _P_FLAG.sub(_keep_key, text)
        if "://" in text and "@" in text:
            text = _URL_CREDENTIALS.sub(_keep_key, text)
            text = _URL_TOKEN.sub(_keep_key, text)
        if ("-u" in text or "-U" in text or "--" in text) and ":" in text:
            text = _QUOTED_USER_FLAG.sub(_keep_key, text)
            text = _USER_FLAG.sub(_keep_key, text)
        return text

    def value(self, value: T) -> T:
        """``value`` with every string inside redacted, of the same type: frozen dataclasses
        (events, findings, decisions) are rebuilt with ``dataclasses.replace``, tuples stay
        tuples, enums (``StrEnum`` states are strings too) are left alone. What a front end
        shows goes through this, so the TUI and the terminal show what the journal keeps."""
        if isinstance(value, Enum):
            return value
        if isinstance(value, str):
            return self.text(value)  # type: ignore[return-value]
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}  # type: ignore[return-value]
        if isinstance(value, list):
            return [self.value(v) for v in value]  # type: ignore[return-value]
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)  # type: ignore[return-value]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {}
            for f in dataclasses.fields(value):
                if not f.init:
                    continue
                old = getattr(value, f.name)
                new = self.value(old)
                if new is not old and new != old:
                    changes[f.name] = new
            return dataclasses.replace(value, **changes) if changes else value
        return value

    def data(self, value: Any) -> Any:
        """Redact every string inside nested dicts, lists and tuples (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value


class LogRedaction(logging.Filter):
    """Redacts every record a log handler writes, whichever library logged it (asyncssh
    logs each command it sends at --log-level info, a warp --secret-key included)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a library's bad format string: keep its parts
            message = f"{record.msg} {record.args}"
        record.msg, record.args = self.redactor.text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.text(record.stack_info)
        return True


# The process's log redactor: it holds the patterns and every secret any Redactor of this
# process was given (a site's, once its run starts), so one redaction covers the logs too.
LOG_REDACTOR = Redactor()


def redact_logs(handler: logging.Handler) -> None:
    """Every record ``handler`` writes is redacted first (the CLI's stderr handler)."""
    handler.addFilter(LogRedaction(LOG_REDACTOR))


def _keep_key(match: re.Match[str]) -> str:
    value = match.group("value")
    if value == REDACTED or value.strip("\"'") in ("", REDACTED):
        return match.group(0)
    # A reference to a variable (`--src-creds "$SRC_CREDS"`, `password=${PW}`) is how a
    # script keeps a secret out of itself: it holds no secret, and rewriting it would break
    # the script's syntax.
    if value.lstrip("\"'").startswith("$"):
        return match.group(0)
    return f"{match.group('key')}{REDACTED}"
