"""The RUNBOOK's GPU Operator upgrade, followed as written on a cluster that already runs the
operator (the brownfield lab's release with the site's own user values), keeps every user
value of the live release (cluster-r1 B2).

The block is run with a real shell from the export folder, after the runbook's opening
block and the line of gpu-operator.preflight that finds the release with ``helm list -A``
(and exports it for every later line); it checks the live values for lists the
exported file would replace, and upgrades with ``--reset-then-reuse-values`` so helm merges
the exported file over the release's last values. ``helm get values`` before and after: the
after is a superset. On the embedded lab the helm stand-in models helm's merge
(simulator/helm_standin.py); on the real control plane it is the real helm v3.22.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from steps import build_plan
from tests.conftest import served_lab
from tests.real_tier import exported_real_lab
from wizard.export import RUNBOOK, export
from wizard.site import load_site

BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)


def step_blocks(text: str, step: str) -> list[str]:
    section = text.split(f"\n### {step}: ", 1)[1].split("\n### ", 1)[0]
    return BLOCK.findall(section)


def user_values(helm: str, kubeconfig: Path, release: str, namespace: str) -> dict[str, Any]:
    out = subprocess.run(
        [helm, "get", "values", release, "--namespace", namespace, "-o", "json",
         "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout or "{}") or {}


def missing(before: Any, after: Any, path: str = "") -> list[str]:
    """The key paths of ``before`` that ``after`` lost or changed (lists: every item kept)."""
    if isinstance(before, dict):
        if not isinstance(after, dict):
            return [path or "."]
        return [m for k, v in before.items() for m in missing(v, after.get(k), f"{path}.{k}")]
    if isinstance(before, list):
        if not isinstance(after, list):
            return [path]
        return [f"{path}[{i}]" for i, item in enumerate(before) if item not in after]
    return [] if before == after else [path]


def release_line(text: str) -> str:
    """gpu-operator.preflight's line that finds the release and exports GNW_RELEASE and
    GNW_NAMESPACE (the install's lines read them)."""
    (block,) = step_blocks(text, "gpu-operator.preflight")
    return next(line for line in block.splitlines() if "export GNW_RELEASE" in line)


def follow(text: str, out: Path, steps: tuple[str, ...], first: str = "") -> None:
    """The steps' blocks in one shell (as the one terminal the runbook is followed in),
    after the opening block and ``first``."""
    opening = BLOCK.findall(text)[0]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    blocks = [block for step in steps for block in step_blocks(text, step)]
    script = "\n".join([opening, first, *blocks])
    ran = subprocess.run(
        ["sh", "-ec", script],
        cwd=out, capture_output=True, text=True, timeout=1500, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, f"{steps}:\n{script}\n{ran.stdout[-2000:]}{ran.stderr}"


def test_the_runbooks_upgrade_keeps_the_live_releases_user_values(tmp_path):
    site_file = tmp_path / "lab" / "site.yaml"
    out = tmp_path / "export"
    with served_lab(site_file):
        site = load_site(site_file)
        kubeconfig = site.resolve_path(site.cluster.kubeconfig)
        before = user_values(site.cluster.helm, kubeconfig, "gpu-operator", "gpu-operator")
        assert before["devicePlugin"]["config"]["name"] == "time-slicing"  # the site's own
        export(site, build_plan(), out)
        text = (out / RUNBOOK).read_text()
        follow(text, out, ("gpu-operator.install",), release_line(text))
        after = user_values(site.cluster.helm, kubeconfig, "gpu-operator", "gpu-operator")
    assert missing(before, after) == []


@pytest.fixture(scope="module")
def brownfield_real(tmp_path_factory):
    yield from exported_real_lab(tmp_path_factory.mktemp("real-brownfield"))


def test_the_runbooks_upgrade_keeps_user_values_with_the_real_helm(brownfield_real):
    lab, out, text = brownfield_real
    before = user_values(str(lab.helm), lab.kubeconfig, "gpu-operator", "gpu-operator")
    assert before, "the brownfield lab's release has user values"
    follow(text, out, ("gpu-operator.preflight", "gpu-operator.install"))
    after = user_values(str(lab.helm), lab.kubeconfig, "gpu-operator", "gpu-operator")
    assert missing(before, after) == []


def test_the_runbook_stops_before_an_upgrade_that_would_replace_a_live_list(tmp_path):
    """helm replaces a list the file sets, never merges it: a live pull secret the exported
    file does not name would be dropped, so the block stops there, naming the key, and the
    release is not upgraded."""
    site_file = tmp_path / "lab" / "site.yaml"
    out = tmp_path / "export"
    with served_lab(site_file):
        site = load_site(site_file)
        kubeconfig = site.resolve_path(site.cluster.kubeconfig)
        extra = tmp_path / "site-secret.yaml"
        extra.write_text("devicePlugin:\n  imagePullSecrets: [{name: site-registry}]\n")
        subprocess.run(
            [site.cluster.helm, "upgrade", "--install", "gpu-operator", "nvidia/gpu-operator",
             "--namespace", "gpu-operator", "--version", site.versions.gpu_operator,
             "--values", str(extra), "--reuse-values", "--kubeconfig", str(kubeconfig)],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        before = user_values(site.cluster.helm, kubeconfig, "gpu-operator", "gpu-operator")
        export(site, build_plan(), out)
        text = (out / RUNBOOK).read_text()
        with pytest.raises(AssertionError) as stopped:
            follow(text, out, ("gpu-operator.install",), release_line(text))
        after = user_values(site.cluster.helm, kubeconfig, "gpu-operator", "gpu-operator")
    assert "the live release sets devicePlugin.imagePullSecrets with items" in str(stopped.value)
    assert after == before
