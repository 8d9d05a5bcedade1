"""Whether containerd on a GPU node still has the nvidia runtime the GPU Operator set up.

The container toolkit (nvidia-container-toolkit v1.20.0, the version GPU Operator v26.7.0
deploys) writes the nvidia runtime into a drop-in, ``/etc/containerd/conf.d/99-nvidia.toml``
(cmd/nvidia-ctk-installer/container/runtime/containerd/containerd.go, DefaultDropInConfig),
and adds ``imports = ["/etc/containerd/conf.d/*.toml"]`` to config.toml. Kubespray v2.29.1
templates config.toml on each run without an imports line, so after a Kubespray run the
drop-in can be on disk and ignored: pods asking for the nvidia runtime then fail with
``no runtime for "nvidia" is configured``. The check reads both files and says which.
"""

from __future__ import annotations

import fnmatch
import posixpath
import shlex
import tomllib
from typing import Any

from steps.join import GROUP_VARS_PATH, TOOLKIT_DROP_IN
from wizard.probe import Report
from wizard.site import Site

DEFAULT_CONFIG = "/etc/containerd/config.toml"
# The CRI plugin's key in a containerd 2.x (config version 3) and a 1.x (version 2) config.
_CRI_PLUGINS = ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri")


def config_path(site: Site) -> str:
    """containerd's config.toml on the nodes (the site's containerd_config, or the default)."""
    return site.cluster.containerd_config or DEFAULT_CONFIG


def read_lines(site: Site) -> list[str]:
    """The runbook lines of the check: config.toml and the toolkit's drop-in, read."""
    from steps.common import shown
    from wizard.transports.base import read_file_command

    return [
        shown(read_file_command(config_path(site)), "imports, runtimes.nvidia"),
        shown(read_file_command(TOOLKIT_DROP_IN), "the toolkit's runtimes.nvidia"),
    ]


def has_nvidia_runtime(config: dict[str, Any]) -> bool:
    plugins = config.get("plugins") or {}
    for key in _CRI_PLUGINS:
        runtimes = ((plugins.get(key) or {}).get("containerd") or {}).get("runtimes") or {}
        if "nvidia" in runtimes:
            return True
    return False


def imported(config: dict[str, Any], config_file: str, path: str) -> bool:
    """Whether config.toml's ``imports`` (globs; relative ones from its own folder, as
    containerd resolves them) cover ``path``."""
    for pattern in config.get("imports") or []:
        if not isinstance(pattern, str):
            continue
        full = (
            pattern
            if pattern.startswith("/")
            else posixpath.join(posixpath.dirname(config_file), pattern)
        )
        if fnmatch.fnmatchcase(path, full):
            return True
    return False


def _parse(text: str) -> dict[str, Any] | str:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return str(exc)


def evaluate_runtime(
    node: str,
    config_file: str,
    config_text: str | None,
    drop_in_text: str | None,
    report: Report,
    namespace: str,
) -> None:
    """One finding, ``nvidia-runtime``: where the runtime comes from, or why it is gone;
    ``namespace`` is the GPU Operator release's (its toolkit pod's, named in the fix)."""
    fix = (
        f"merge {GROUP_VARS_PATH} from the export into the Kubespray inventory so every "
        "Kubespray run keeps the imports line; until then restart the toolkit pod on the node "
        f"(it adds the line again): kubectl -n {shlex.quote(namespace)} delete pod -l "
        f"app=nvidia-container-toolkit-daemonset --field-selector spec.nodeName={node}"
    )
    if config_text is None:
        report.fail(
            "nvidia-runtime",
            f"{config_file} does not exist on {node}",
            "check containerd on the node and cluster.containerd_config in the site file",
        )
        return
    config = _parse(config_text)
    if isinstance(config, str):
        report.fail("nvidia-runtime", f"{config_file} on {node} is not valid TOML: {config}", fix)
        return
    if has_nvidia_runtime(config):
        report.ok("nvidia-runtime", f"{node}: the nvidia runtime is in {config_file}")
        return
    drop_in = _parse(drop_in_text) if drop_in_text is not None else None
    in_drop_in = isinstance(drop_in, dict) and has_nvidia_runtime(drop_in)
    if in_drop_in and imported(config, config_file, TOOLKIT_DROP_IN):
        report.ok(
            "nvidia-runtime",
            f"{node}: the nvidia runtime comes from the toolkit's {TOOLKIT_DROP_IN}, which "
            f"{config_file} imports",
        )
    elif in_drop_in:
        report.fail(
            "nvidia-runtime",
            f"{node}: {config_file} no longer imports {TOOLKIT_DROP_IN}, so containerd ignores "
            "the nvidia runtime (a Kubespray run re-templated config.toml without the imports "
            "line); GPU pods fail with 'no runtime for \"nvidia\" is configured'",
            fix,
        )
    else:
        report.fail(
            "nvidia-runtime",
            f"{node}: no nvidia runtime in {config_file} nor in {TOOLKIT_DROP_IN}",
            "check the nvidia-container-toolkit-daemonset pod on the node and its logs",
        )
