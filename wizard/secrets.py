"""Every secret value a site's run handles, so that one redactor knows them all.

Secrets reach the wizard from four places, and none of them is the site file's own text
(except what an operator typed into a benchmark command):

- environment variables the site names: ``registry.username_env`` / ``password_env`` and
  ``ssh.key_passphrase_env`` (on the top level, a node or a peer);
- the credentials of the kubeconfig (``token``, ``password``, ``client-key-data``, an
  auth provider's tokens): the client sends them, a careless error could print them;
- values after a credential flag in an operator-configured benchmark command
  (``warp ... --secret-key X``, ``vllm bench serve --api-key X``): the command is run,
  journaled and shown, so its value must be known to be replaced wherever it appears,
  not only right after the flag;
- a passphrase typed at the prompt is never held anywhere (wizard/transports/ssh.py), so
  there is nothing to collect.

Values shorter than the redactor's minimum are left out by the redactor itself.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from wizard.redact import SECRET_FLAGS

if TYPE_CHECKING:
    from wizard.site import Site

# A kubeconfig is a few KB; one far larger is not read for secrets (the client then
# reports what is wrong with it).
MAX_KUBECONFIG_BYTES = 4 << 20
_KUBECONFIG_SECRET_KEYS = (
    "token",
    "password",
    "client-key-data",
    "id-token",
    "refresh-token",
    "access-token",
    "client-secret",
)


def site_secrets(site: Site) -> list[str]:
    """The secret values of ``site``'s run, in a stable order, without repeats."""
    values: list[str] = []
    names = [site.registry.username_env, site.registry.password_env, site.ssh.key_passphrase_env]
    names += [h.ssh.key_passphrase_env for h in [*site.nodes, *site.aistor.peers]]
    for var in dict.fromkeys(names):
        if var and os.environ.get(var):
            values.append(os.environ[var])
    measurements = site.measurements
    for bench in (measurements.aistor_tcp, measurements.aistor_direct, measurements.vllm):
        if bench is not None:
            values += command_secrets(bench.command)
    values += kubeconfig_secrets(site.resolve_path(site.cluster.kubeconfig))
    return list(dict.fromkeys(values))


def command_secrets(command: str) -> list[str]:
    """The values after credential flags in a shell command line (``--secret-key X``,
    ``--api-key=X``); a variable reference (``"$KEY"``) is no secret and is left out."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: fall back to whitespace
        words = command.split()
    found = []
    flags = {f"--{flag}" for flag in SECRET_FLAGS}
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        name, eq, value = word.partition("=")
        if name.lower() in flags:
            if not eq:
                value = following
            if value and not value.startswith("$"):
                found.append(value)
        # curl's -u/--user and -U/--proxy-user user:password (curl(1)), also `-uuser:pw`.
        user = None
        if word in ("-u", "-U", "--user", "--proxy-user"):
            user = following
        elif word.startswith(("--user=", "--proxy-user=")):
            user = word.partition("=")[2]
        elif word[:2] in ("-u", "-U") and len(word) > 2 and ":" in word:
            user = word[2:]
        if user and ":" in user and not user.startswith("$"):
            password = user.partition(":")[2]
            found += [user, password] if password and not password.startswith("$") else []
        # docker/podman/nerdctl login -p and sshpass -p PASSWORD (their --help).
        if word == "-p" and following and not following.startswith("$"):
            before = words[max(0, i - 8) : i]
            if "sshpass" in before[-1:] or "login" in before:
                found.append(following)
        # scheme://user:password@host in a URL the command fetches.
        _, sep, rest = word.partition("://")
        if sep and "@" in rest.split("/", 1)[0]:
            credentials = rest.split("/", 1)[0].rpartition("@")[0]
            password = credentials.partition(":")[2]
            if password and not password.startswith("$"):
                found.append(password)
    return found


def kubeconfig_secrets(path: Path) -> list[str]:
    """Credentials in a kubeconfig file; nothing when it cannot be read or parsed (the
    Kubernetes client says why when it is used)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_KUBECONFIG_BYTES:
            return []
        data = yaml.safe_load(path.read_bytes())
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return []
    found: list[str] = []
    _collect(data, found, depth=0)
    return found


def _collect(value: Any, found: list[str], depth: int) -> None:
    if depth > 16:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and str(key).lower() in _KUBECONFIG_SECRET_KEYS:
                found.append(item)
            else:
                _collect(item, found, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _collect(item, found, depth + 1)
