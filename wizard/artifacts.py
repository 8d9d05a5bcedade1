"""Artifacts: files the wizard renders (host files, manifests, values, scripts, sheets).

Rendering uses Jinja2 with ``StrictUndefined``: a template that names a value the site
does not provide is an error at render time, never an empty string on a production host.
"""

from __future__ import annotations

import difflib
import hashlib
import json
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
    A ConfigMap's JSON values are diffed pretty-printed (``readable``), so that a changed
    field is one line rather than one escaped string; when the two sides differ only in
    how their JSON is spaced, the diff is of the text as it is.
    """
    label = f"live: {destination}" if live is not None else f"live: {destination} (absent)"
    shown_live, shown_desired = (None if live is None else readable(live)), readable(desired)
    if shown_live == shown_desired and live != desired:
        shown_live, shown_desired = live, desired  # the difference is only the spacing
    before = [] if shown_live is None else shown_live.splitlines(keepends=True)
    after = shown_desired.splitlines(keepends=True)
    lines = difflib.unified_diff(before, after, fromfile=label, tofile=f"desired: {destination}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as YAML block scalars (``|``), not escaped one-liners."""


def _str_block(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_block)


def readable(text: str) -> str:
    """A ConfigMap (YAML) with each JSON value of ``data`` pretty-printed as a block
    scalar, for reading a diff; any other text as it is. Only for showing: what is
    applied and checksummed is the artifact's own content."""
    try:
        obj = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if not isinstance(obj, dict) or obj.get("kind") != "ConfigMap":
        return text
    data = obj.get("data")
    if not isinstance(data, dict):
        return text
    changed = False
    for key, value in data.items():
        if not isinstance(value, str):
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            continue
        if isinstance(parsed, dict | list):
            data[key] = json.dumps(parsed, indent=2) + "\n"
            changed = True
    if not changed:
        return text
    return yaml.dump(obj, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True)
