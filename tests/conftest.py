"""Shared test fixtures: where ../shared is, small site files, isolated state dirs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GNW_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
REFS = SHARED / "refs"

MINIMAL_SITE = """\
name: lab
nodes:
  - name: gpu-1
    host: 10.0.0.1
    bond: {ports: [ens5f0np0, ens5f1np1]}
    rdma_ip: 192.168.50.1
aistor:
  peers:
    - {name: aistor-1, host: 10.0.1.1, rdma_ip: 192.168.50.100}
"""


def leaf_paths(data: dict, prefix: str = ""):
    """Dotted paths of a nested mapping's leaves (an empty mapping counts as a leaf):
    for checking rendered Helm values against the chart's own values.yaml."""
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from leaf_paths(value, path)
        else:
            yield path


def node_entry(name: str, index: int) -> str:
    """One GPU node of a site file, shaped like MINIMAL_SITE's gpu-1."""
    return (
        f"  - name: {name}\n    host: 10.0.0.{index}\n    bond: {{ports: [ens5f0np0, ens5f1np1]}}\n"
        f"    rdma_ip: 192.168.50.{index}\n"
    )


def with_nodes(count: int) -> str:
    """MINIMAL_SITE with gpu-2 ... gpu-<count> after gpu-1."""
    extra = "".join(node_entry(f"gpu-{i}", i) for i in range(2, count + 1))
    return MINIMAL_SITE.replace("aistor:", extra + "aistor:")


def fleet_site(count: int, name: str = "fleet") -> str:
    """A site of ``count`` GPU nodes gpu-01 ... (more than six is a fleet), no peers."""
    nodes = "".join(node_entry(f"gpu-{i:02d}", i) for i in range(1, count + 1))
    return f"name: {name}\nnodes:\n{nodes}"


def fixture_text(kind: str, name: str) -> str:
    """The text of ../shared/fixtures/KIND/NAME (fails clearly if shared/ is missing)."""
    path = FIXTURES / kind / name
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"fixture {path} is missing: CI needs ../shared beside the repo")
        pytest.skip(f"{path} not found: set GNW_SHARED to the shared/ folder")
    return path.read_text()


def fixture_files() -> list[tuple[str, Path]]:
    if not FIXTURES.is_dir():
        return []
    return [(p.parent.name, p) for p in sorted(FIXTURES.glob("*/*")) if p.is_file()]


@pytest.fixture(autouse=True, scope="session")
def _own_config_folder(tmp_path_factory):
    """The TUI remembers the theme in the user's config folder: the tests use their own
    (a developer's chosen theme must not change a snapshot, nor a test their theme)."""
    folder = tmp_path_factory.mktemp("config")
    before = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = before


@pytest.fixture
def site_file(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(MINIMAL_SITE)
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def run_cli(
    *args: str, cwd: Path = REPO, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`gpu-node-wizard ARGS` in a fresh process, as an operator's shell would run it."""
    return subprocess.run(
        [sys.executable, "-m", "frontend.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@contextlib.contextmanager
def served_lab(site: Path, *faults: str):
    """`gpu-node-wizard lab --write-site SITE` in its own process, until the block ends."""
    argv = [sys.executable, "-m", "frontend.cli", "lab", "--write-site", str(site)]
    for fault in faults:
        argv += ["--fault", fault]
    lab = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        for line in lab.stdout:
            if line.startswith("try:"):
                break
        else:
            raise RuntimeError("the lab did not start")
        yield lab
    finally:
        lab.terminate()
        lab.wait(timeout=10)


# The phases that take a node from bare to a schedulable RDMA worker (host-rdma's slow
# perftest to an AIStor node is left out: no check under test reads it).
K8S_PHASES = (
    "preflight",
    "packages",
    "e810",
    "bond",
    "irdma",
    "join",
    "gpu-operator",
    "rdma-plugin",
)


async def run_in_lab(
    tmp_path: Path,
    frontend,
    *faults: str,
    phases: tuple[str, ...] | None = None,
    prepare=None,
    waivers: dict[str, str] | None = None,
):
    """Run the plan (or only ``phases``) against a fresh in-process lab; return (outcome, lab).

    The lab is stopped afterwards but its host models and cluster state stay readable.
    """
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from steps import build_plan
    from wizard.site import load_site

    plan = build_plan()
    only = (
        None if phases is None else [s.id for p in plan.phases if p.id in phases for s in p.steps]
    )
    lab = Lab(tmp_path / "lab", faults=faults)
    await lab.start()
    try:
        if prepare is not None:
            prepare(lab)
        outcome = await run_engine(
            load_site(lab.site_path), plan, tmp_path / "state", frontend, only=only,
            waivers=waivers,
        )  # fmt: skip
    finally:
        await lab.stop()
    return outcome, lab


def findings_of(outcome, step: str) -> dict:
    """The findings a step produced, by check name."""
    return {f.check: f for (s, _), fs in outcome.summary.findings.items() if s == step for f in fs}


# The real control plane's tier (tests/real_tier.py): one lab on it per test module.
from tests.real_tier import real_lab  # noqa: E402, F401

# The real tier: the tests that need the built control plane. .ci/run runs the rest while the
# build runs (-m "not real_plane") and these once it is done (-m real_plane); a plain
# `python -m pytest` runs both. A test is real-tier by its module (test_real_*.py, the
# Ansible play's real run), by a parameter whose value is "real", or by a fixture of the
# real lab (real_lab, or a name ending in _real). tests/real_tier.require_real fails a test
# that reaches it in the embedded tier without being marked, so a new real test cannot
# slip into the step that runs before the build is done.
REAL_TIER_MODULES = ("test_ansible_play.py",)


def is_real_plane(item: pytest.Item) -> bool:
    name = Path(str(item.fspath)).name
    if name.startswith("test_real_") or name in REAL_TIER_MODULES:
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "real" in params.values():  # control_plane="real", or a fixture parametrized so
        return True
    fixtures = getattr(item, "fixturenames", ())
    return any(f == "real_lab" or f.endswith("_real") for f in fixtures)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_real_plane(item):
            item.add_marker(pytest.mark.real_plane)
