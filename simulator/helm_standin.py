"""A ``helm`` stand-in for the lab: records releases and values in the lab's API server.

The lab writes a small ``helm`` executable that calls ``main``; it finds the lab through
the ``--kubeconfig`` it is given, as the real helm finds a cluster. Installing the GPU
Operator makes the simulated operator appear (pods, allocatable GPUs).
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any

import yaml

VERSION = "v3.16.2+g13654a5"


def _option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


_WITH_VALUE = {
    "--namespace",
    "-n",
    "--version",
    "--values",
    "-f",
    "--timeout",
    "--kubeconfig",
    "--kube-context",
}


def _positional(args: list[str]) -> list[str]:
    """Arguments that are not options or option values."""
    result, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            result.append(arg)
    return result


def _server(args: list[str]) -> str:
    path = _option(args, "--kubeconfig")
    if not path:
        raise SystemExit("Error: the lab's helm needs --kubeconfig")
    with open(path) as handle:
        kubeconfig = yaml.safe_load(handle)
    return kubeconfig["clusters"][0]["cluster"]["server"]


def _request(server: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server + path, data=data, method="POST" if data else "GET")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


# The charts the lab's helm repository "nvidia" holds: the GPU Operator's releases the lab
# knows (its Chart.yaml name, version, appVersion).
LAB_CHARTS = {("nvidia/gpu-operator", "v26.7.0"), ("nvidia/gpu-operator", "v26.3.3")}


def _show_chart(chart: list[str], version: str | None) -> int:
    """`helm show chart REF --version V`: the chart's Chart.yaml, or helm 3's error for a
    repository without that chart or version."""
    ref = chart[0] if chart else ""
    repo, _, name = ref.partition("/")
    if repo != "nvidia":
        print(f"Error: repo {repo} not found", file=sys.stderr)
        return 1
    if (ref, version) not in LAB_CHARTS:
        print(f'Error: chart "{name}" matching {version} not found in {repo} index. '
              "(try 'helm repo update')", file=sys.stderr)  # fmt: skip
        return 1
    print(f"apiVersion: v2\nappVersion: {version}\nname: {name}\nversion: {version}")
    return 0


def coalesce_tables(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    """helm v3 pkg/chartutil/coalesce.go ``CoalesceTables(dst, src)`` (coalesceTablesFullKey
    with merge false): ``dst`` is authoritative; a key only in ``src`` is copied, tables in
    both are coalesced key by key, any other value of ``dst`` (a scalar, a list) wins whole,
    and a null in ``dst`` over a non-null ``src`` value deletes the key."""
    if not src:
        return dst
    for key, value in src.items():
        if key in dst and dst[key] is None and value is not None:
            del dst[key]
        elif key not in dst:
            dst[key] = value
        elif isinstance(value, dict) and isinstance(dst[key], dict):
            coalesce_tables(dst[key], value)
    return dst


def upgrade_values(args: list[str], given: dict[str, Any], last: dict[str, Any] | None) -> Any:
    """The user values of the new revision, as helm v3 pkg/action/upgrade.go ``reuseValues``
    computes them: ``--reset-values`` ignores the last release's (and wins over the other
    two flags); ``--reuse-values`` and ``--reset-then-reuse-values`` coalesce the given
    values over the last release's config; with neither, the last config is kept only when
    nothing is given."""
    if last is None or "--reset-values" in args:
        return given
    if "--reuse-values" in args or "--reset-then-reuse-values" in args:
        return coalesce_tables(given, json.loads(json.dumps(last)))
    return given if given else last


def main(args: list[str]) -> int:
    if not args:
        print("The Kubernetes package manager (lab stand-in)")
        return 0
    if args[0] == "version":
        print(VERSION if "--short" in args else f'version.BuildInfo{{Version:"{VERSION}"}}')
        return 0
    if args[:2] == ["show", "chart"]:
        return _show_chart(_positional(args[2:])[:1], _option(args, "--version"))
    try:
        server = _server(args)
        releases = _request(server, "/lab/v1/helm/releases")
    except (OSError, urllib.error.URLError, KeyError) as exc:
        print(f"Error: Kubernetes cluster unreachable: {exc}", file=sys.stderr)
        return 1
    namespace = _option(args, "--namespace", "-n") or "default"
    if args[:2] == ["get", "values"] and len(_positional(args)) > 2:
        release = releases.get(f"{namespace}/{_positional(args)[2]}")
        if release is None:
            print("Error: release: not found", file=sys.stderr)
            return 1
        print(json.dumps(release["values"]) if _option(args, "-o", "--output") == "json"
              else "USER-SUPPLIED VALUES:\n" + yaml.safe_dump(release["values"]))  # fmt: skip
        return 0
    if args[0] == "list":
        # helm 3 `list -o json` (cmd/helm/list.go): "chart" is <chart name>-<chart version>
        # (formatChartname), app_version the chart's appVersion; -A lists every namespace.
        every = "-A" in args or "--all-namespaces" in args
        print(json.dumps([{"name": r["name"], "namespace": r["namespace"], "revision": str(r["revision"]),
                           "updated": "2026-11-30 00:00:00.000000000 +0000 UTC", "status": r["status"],
                           "chart": f"{r['chart'].rsplit('/', 1)[-1]}-{r['version']}",
                           "app_version": r["version"]}
                          for r in releases.values() if every or r["namespace"] == namespace]))  # fmt: skip
        return 0
    if args[0] == "upgrade" and "--install" in args:
        positional = _positional(args[1:])
        name, chart = positional[0], positional[1]
        values: dict[str, Any] = {}
        values_file = _option(args, "--values", "-f")
        if values_file:
            with open(values_file) as handle:
                values = yaml.safe_load(handle) or {}
        existed = f"{namespace}/{name}" in releases
        if not existed:
            print(f'Release "{name}" does not exist. Installing it now.')
        else:
            values = upgrade_values(args, values, releases[f"{namespace}/{name}"]["values"])
        result = _request(server, "/lab/v1/helm/upgrade", {
            "name": name, "namespace": namespace, "chart": chart,
            "version": _option(args, "--version") or "", "values": values,
        })  # fmt: skip
        print(f"NAME: {name}\nLAST DEPLOYED: lab\nNAMESPACE: {namespace}\n"
              f"STATUS: {result['status']}\nREVISION: {result['revision']}")  # fmt: skip
        if result["status"] != "deployed":
            print(f"Error: {result.get('message', 'release failed')}", file=sys.stderr)
            return 1
        return 0
    print(f"Error: the lab's helm does not simulate `{' '.join(args[:2])}`", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
