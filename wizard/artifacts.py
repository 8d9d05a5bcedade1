"""Artifacts: files the wizard renders (host files, manifests, values, scripts, sheets).

Rendering uses Jinja2 with ``StrictUndefined``: a template that names a value the site
does not provide is an error at render time, never an empty string on a production host.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

import jinja2
import yaml


class Target(StrEnum):
    HOST_FILE = "host-file"
    K8S_OBJECT = "k8s-object"
    HELM_VALUES = "helm-values"
    SCRIPT = "script"
    SWITCH = "switch"
    INVENTORY = "inventory"
    DOCUMENT = "document"


@dataclass(frozen=True)
class Artifact:
    """A rendered file: where it goes in an export, and where it goes for real."""

    path: str  # relative path in an export, e.g. "nodes/gpu-1/host/etc/modules-load.d/irdma.conf"
    content: str
    target: Target
    destination: str  # "/etc/modules-load.d/irdma.conf on gpu-1", "ConfigMap kube-system/x"
    description: str
    mode: int = 0o644
    host_path: str | None = None  # for host files: the absolute path on the node

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


def k8s_yaml(obj: dict[str, Any]) -> str:
    """A Kubernetes object (or a part of one) as YAML in the object's own key order; used
    for both sides of a diff, desired and live."""
    return yaml.safe_dump(obj, sort_keys=False)


def k8s_object(path: str, obj: dict[str, Any], destination: str, description: str) -> Artifact:
    """A Kubernetes object the wizard applies (exported as YAML under ``path``)."""
    return Artifact(path, k8s_yaml(obj), Target.K8S_OBJECT, destination, description)


def host_file(
    node_name: str, path: str, content: str, description: str, mode: int = 0o644
) -> Artifact:
    """A file that belongs at ``path`` on a node (exported under nodes/<node>/host<path>)."""
    return Artifact(
        f"nodes/{node_name}/host{path}",
        content,
        Target.HOST_FILE,
        f"{path} on {node_name}",
        description,
        mode,
        host_path=path,
    )


@cache
def _environment() -> jinja2.Environment:
    root = resources.files("templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = _to_yaml
    env.filters["shquote"] = _shquote
    return env


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip("\n")


def _shquote(value: Any) -> str:
    import shlex

    return shlex.quote(str(value))


def render(template: str, **context: Any) -> str:
    """Render ``templates/<template>`` with ``context``; undefined names are errors."""
    return _environment().get_template(template).render(**context)


def unified_diff(live: str | None, desired: str, destination: str) -> str:
    """A unified diff of what is there now against what the wizard wants.

    ``live`` is None when the object does not exist yet: the diff then adds every line.
    """
    before = [] if live is None else live.splitlines(keepends=True)
    after = desired.splitlines(keepends=True)
    label = f"live: {destination}" if live is not None else f"live: {destination} (absent)"
    lines = difflib.unified_diff(before, after, fromfile=label, tofile=f"desired: {destination}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
