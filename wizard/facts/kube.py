"""Cluster facts from kubectl and helm text output (for pasted output and reports).

The wizard itself reads the cluster through the Kubernetes API; these parsers exist for
output an operator pastes and for the same checks applied to it.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from wizard import yamlfile
from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean, to_int


def _columns(header: str) -> list[tuple[str, int]]:
    """(column name, start offset) for a kubectl table header (names may hold '-')."""
    return [(m.group(0), m.start()) for m in re.finditer(r"\S+", header)]


def _slice(line: str, columns: list[tuple[str, int]]) -> dict[str, str]:
    """Cut a row at the header's column starts (kubectl aligns with a tabwriter)."""
    if "\t" in line:
        cells = re.split(r"\t+", line.strip())
        return {name: cells[i] if i < len(cells) else "" for i, (name, _) in enumerate(columns)}
    row = {}
    for i, (name, start) in enumerate(columns):
        end = columns[i + 1][1] if i + 1 < len(columns) else None
        row[name] = line[start:end].strip()
    return row


def _table(text: str, required: tuple[str, ...], kind: str) -> Iterator[dict[str, str]]:
    """The rows under the first header naming every ``required`` column, one at a time: a
    caller that stops early (a bound) never holds the rest of a large paste in memory."""
    lines = (line.rstrip("\n") for line in io.StringIO(text))
    for line in lines:
        names = line.split()
        if all(r in names for r in required):
            columns = _columns(line)
            for row_line in lines:
                if not row_line.strip() or row_line.lstrip().startswith("#"):
                    continue
                if len(row_line.split()) < len(required):
                    continue
                yield _slice(row_line, columns)
            return
    raise ParseError(kind, f"no table header with {', '.join(required)}")


def _none(value: str | None) -> str | None:
    return None if value in (None, "", "<none>") else value


# -- kubectl get nodes


@dataclass
class KubeNode(Fact):
    name: str
    status: str
    roles: list[str]
    age: str | None
    version: str | None
    internal_ip: str | None
    os_image: str | None
    kernel_version: str | None
    container_runtime: str | None

    @property
    def ready(self) -> bool:
        return self.status.split(",")[0] == "Ready"


@dataclass
class KubeNodes(Fact):
    nodes: list[KubeNode]


# A bound, not a guess at a fleet: Kubernetes supports at most 5000 nodes in one cluster
# (kubernetes.io/docs/setup/best-practices/cluster-large), so a "node list" four times that
# is not one cluster's, and reading it all would cost memory in proportion to the paste.
MAX_NODES = 20_000


@parser("kube-nodes", "kubectl get nodes [-o wide]")
def parse_kube_nodes(text: str) -> KubeNodes:
    text = clean(text, "kube-nodes")
    rows = _table(text, ("NAME", "STATUS", "ROLES"), "kube-nodes")
    nodes = []
    for row in rows:
        if len(nodes) == MAX_NODES:
            raise ParseError(
                "kube-nodes",
                f"more than {MAX_NODES} nodes: Kubernetes supports at most 5000 per cluster "
                "(kubernetes.io, Considerations for large clusters); is this one listing?",
            )
        roles = _none(row.get("ROLES"))
        nodes.append(
            KubeNode(
                name=row["NAME"],
                status=row["STATUS"],
                roles=roles.split(",") if roles else [],
                age=_none(row.get("AGE")),
                version=_none(row.get("VERSION")),
                internal_ip=_none(row.get("INTERNAL-IP")),
                os_image=_none(row.get("OS-IMAGE")),
                kernel_version=_none(row.get("KERNEL-VERSION")),
                container_runtime=_none(row.get("CONTAINER-RUNTIME")),
            )
        )
    return KubeNodes(nodes)


# -- kubectl describe node: Capacity / Allocatable


@dataclass
class KubeNodeResources(Fact):
    capacity: dict[str, str]
    allocatable: dict[str, str]


@parser("kube-node-resources", "kubectl describe node")
def parse_kube_node_resources(text: str) -> KubeNodeResources:
    text = clean(text, "kube-node-resources")
    blocks: dict[str, dict[str, str]] = {"Capacity": {}, "Allocatable": {}}
    current: dict[str, str] | None = None
    found = False
    for line in text.splitlines():
        header = re.match(r"^(Capacity|Allocatable):\s*$", line)
        if header:
            current, found = blocks[header.group(1)], True
            continue
        if current is None:
            continue
        entry = re.match(r"^\s+(?P<key>[\w./-]+):\s+(?P<value>\S+)\s*$", line)
        if entry:
            current[entry["key"]] = entry["value"]
        elif line.strip():
            current = None
    if not found:
        raise ParseError("kube-node-resources", "no 'Capacity:' or 'Allocatable:' block")
    return KubeNodeResources(blocks["Capacity"], blocks["Allocatable"])


# -- kubectl get pods


@dataclass
class KubePod(Fact):
    namespace: str | None
    name: str
    ready: str
    status: str
    restarts: int
    last_restart: str | None
    age: str | None

    @property
    def healthy(self) -> bool:
        if self.status in ("Completed", "Succeeded"):
            return True
        done, _, total = self.ready.partition("/")
        return self.status == "Running" and done == total and done != ""


@dataclass
class KubePods(Fact):
    pods: list[KubePod]
    healthy: bool


@parser("kube-pods", "kubectl get pods [-n NS]")
def parse_kube_pods(text: str) -> KubePods:
    text = clean(text, "kube-pods")
    rows = _table(text, ("NAME", "READY", "STATUS"), "kube-pods")
    pods = []
    for row in rows:
        restarts = row.get("RESTARTS", "")
        match = re.match(r"^(\d+)(?:\s*\((.+?)\))?$", restarts)
        pods.append(
            KubePod(
                namespace=_none(row.get("NAMESPACE")),
                name=row["NAME"],
                ready=row["READY"],
                status=row["STATUS"],
                restarts=to_int(match.group(1)) if match else 0,
                last_restart=match.group(2) if match else None,
                age=_none(row.get("AGE")),
            )
        )
    return KubePods(pods, all(p.healthy for p in pods))


# -- helm get values


# Chart value keys are identifiers (``driver``, ``node-feature-discovery``), never prose.
_VALUES_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass
class HelmValues(Fact):
    values: dict[str, Any]


# A release's user-supplied values are a few KB (the GPU Operator's whole chart default
# values.yaml is ~30 KB); YAML is parsed in pure Python at about 1 MB/s, so the cap is
# far below the general 64 MB one.
MAX_HELM_VALUES_CHARS = 4 << 20


@parser("helm-values", "helm get values REL [-o yaml|json]")
def parse_helm_values(text: str) -> HelmValues:
    if len(text) > MAX_HELM_VALUES_CHARS:
        raise ParseError(
            "helm-values",
            f"{len(text) >> 20} MB of values is more than {MAX_HELM_VALUES_CHARS >> 20} MB: "
            "not the values of a chart release",
        )
    text = clean(text, "helm-values")
    header = text.lstrip().startswith("USER-SUPPLIED VALUES:")
    body = re.sub(r"^USER-SUPPLIED VALUES:\s*\n?", "", text.lstrip(), count=1)
    try:
        if body.lstrip().startswith("{"):
            data = json.loads(body)
        else:  # no aliases, no duplicate keys, at most 32 levels: what Helm prints
            data = yamlfile.loads(body, "helm get values output")
    except (json.JSONDecodeError, yamlfile.YamlFileError) as exc:
        reason = str(exc).splitlines()[0]
        raise ParseError("helm-values", f"not YAML or JSON: {reason}") from None
    if data is None:
        if header or body.strip() == "null":
            return HelmValues({})
        raise ParseError("helm-values", "no values and no 'USER-SUPPLIED VALUES:' header")
    if not isinstance(data, dict):
        raise ParseError("helm-values", f"values are a {type(data).__name__}, not a mapping")
    odd = [k for k in data if not isinstance(k, str) or not _VALUES_KEY.match(k)]
    if odd:
        raise ParseError("helm-values", f"{odd[0]!r} is not a Helm values key")
    return HelmValues(data)
