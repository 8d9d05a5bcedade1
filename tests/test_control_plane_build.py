"""`lab --build-control-plane`: the generated build modules, the clear errors without Go or
without the module proxy, and a second build that builds nothing (no network in tests:
the builds themselves run in .ci/run, and the real tier uses what they made)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.controlplane import build
from simulator.controlplane.versions import COMPONENTS, ETCD, HELM, KUBECTL, KUBERNETES

# Shaped as k8s.io/kubernetes' go.mod: staging modules required at v0.0.0 and replaced by
# ./staging paths, and one ordinary replace that must survive as it is.
K8S_GO_MOD = """\
module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
\tgithub.com/spf13/cobra v1.8.1
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

require k8s.io/kubelet v0.0.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // a comment
\tk8s.io/kubelet => ./staging/src/k8s.io/kubelet
\tgithub.com/example/fork => github.com/example/fork v1.2.3
)
"""

# Shaped as etcd's server/go.mod: siblings required at their own published versions
# (client/v2 is v2.305.x), plus a guard replace for a module nothing requires.
ETCD_GO_MOD = """\
module go.etcd.io/etcd/server/v3

go 1.23

require (
\tgo.etcd.io/etcd/api/v3 v3.5.35
\tgo.etcd.io/etcd/client/v2 v2.305.35
)

replace (
\tgo.etcd.io/etcd/api/v3 => ../api
\tgo.etcd.io/etcd/client/v2 => ../client/v2
)

replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
"""


def test_kubernetes_staging_modules_become_their_published_versions():
    text = build.build_module(KUBERNETES, K8S_GO_MOD)
    assert f"require k8s.io/kubernetes {KUBERNETES.version}" in text
    assert "go 1.24.0" in text
    for module in ("k8s.io/api", "k8s.io/client-go", "k8s.io/kubelet"):
        assert f"\t{module} => {module} {KUBERNETES.sibling_version}" in text
    assert "\tgithub.com/example/fork => github.com/example/fork v1.2.3" in text
    assert "./staging" not in text


def test_etcd_siblings_take_the_versions_its_go_mod_requires():
    text = build.build_module(ETCD, ETCD_GO_MOD)
    assert "\tgo.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.5.35" in text
    assert "\tgo.etcd.io/etcd/client/v2 => go.etcd.io/etcd/client/v2 v2.305.35" in text
    assert "FORBIDDEN" not in text and "../" not in text


def test_versions_are_pinned_for_the_clusters_minor():
    assert KUBERNETES.version.startswith("v1.33.")
    assert KUBERNETES.sibling_version == "v0.33." + KUBERNETES.version.split(".")[2]
    assert ETCD.version.startswith(("v3.5.", "v3.6."))
    assert HELM.version.startswith("v3.")
    assert {c.binary_names() for c in COMPONENTS} == {
        ("etcd",),
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
        ("helm",),
        ("kubectl",),
    }


def test_cache_is_outside_the_repository_and_keyed_by_version(monkeypatch, tmp_path):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cp"))
    assert build.bin_dir(KUBERNETES) == tmp_path / "cp" / f"kubernetes-{KUBERNETES.version}" / "bin"
    monkeypatch.delenv(build.CACHE_ENV)
    repo = Path(build.__file__).resolve().parents[3]
    assert repo not in build.cache_root().parents


def _stamp_built(root: Path, components=COMPONENTS) -> None:
    for component in components:
        folder = build.bin_dir(component, root)
        folder.mkdir(parents=True)
        for name in component.binary_names():
            (folder / name).write_text("")
        (folder.parent / build.STAMP).write_text(json.dumps({"version": component.version}))


def test_kubectl_is_the_servers_version_in_a_cache_folder_of_its_own(tmp_path, monkeypatch):
    """kubectl v1.33 (the skew policy: within one minor of the API server) from the same
    module, version and version stamps as the server binaries, but its own component: a
    cache that has the server binaries (stamped before kubectl was a component) builds
    kubectl alone, and keeps every other stamp as it was."""
    assert (KUBECTL.module, KUBECTL.version) == (KUBERNETES.module, KUBERNETES.version)
    assert KUBECTL.ldflags == KUBERNETES.ldflags
    assert KUBECTL.sibling_version == KUBERNETES.sibling_version
    assert KUBECTL.key != KUBERNETES.key
    _stamp_built(tmp_path, tuple(c for c in COMPONENTS if c is not KUBECTL))
    stamps = {c.key: (build.bin_dir(c, tmp_path).parent / build.STAMP) for c in COMPONENTS}
    before = {k: p.read_text() for k, p in stamps.items() if p.is_file()}
    assert build.missing_reason(tmp_path) and KUBECTL.key in build.missing_reason(tmp_path)
    built: list[str] = []
    monkeypatch.setattr(build.Builder, "_go_version", lambda self: "go1.26.8")
    monkeypatch.setattr(build.Builder, "_build", lambda self, c, label, go: built.append(c.key))
    build.Builder(tmp_path, Path("/bin/false"), 1, lambda _: None).build_all()
    assert built == [KUBECTL.key]
    after = {k: stamps[k].read_text() for k in before}
    # The old stamps are only given their recipe (kept, not rebuilt): same version.
    assert {k: json.loads(v)["version"] for k, v in after.items()} == {
        k: json.loads(v)["version"] for k, v in before.items()
    }


def test_a_second_build_builds_nothing(tmp_path):
    """Idempotent: with every version built, the builder never runs go (here a go that
    would fail at once)."""
    _stamp_built(tmp_path)
    said: list[str] = []
    builder = build.Builder(tmp_path, Path("/bin/false"), 1, said.append)
    assert builder.build_all() == [build.bin_dir(c, tmp_path) for c in COMPONENTS]
    assert len(said) == len(COMPONENTS) and all("already built" in s for s in said)
    assert build.missing_reason(tmp_path) is None


def test_an_interrupted_build_is_not_taken_for_a_built_one(tmp_path):
    """Binaries without the stamp (the stamp is written last) count as not built."""
    _stamp_built(tmp_path)
    (build.bin_dir(HELM, tmp_path).parent / build.STAMP).unlink()
    assert not build.built(HELM, tmp_path)
    reason = build.missing_reason(tmp_path)
    assert reason and HELM.key in reason and "lab --build-control-plane" in reason


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "frontend.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_without_go_the_build_says_so(tmp_path):
    result = _cli("lab", "--build-control-plane",
                  env={build.CACHE_ENV: str(tmp_path), build.GO_ENV: str(tmp_path / "no-go")})  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "needs Go" in result.stderr and "GNW_GO" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_the_module_proxy_the_build_says_so(tmp_path):
    try:
        go = build.find_go()
    except build.BuildError:
        pytest.skip("no go command on this machine")
    result = _cli(
        "lab",
        "--build-control-plane",
        env={
            build.CACHE_ENV: str(tmp_path / "cp"),
            build.GO_ENV: str(go),
            "GOPROXY": "off",
            "GOMODCACHE": str(tmp_path / "mod"),
            "GOFLAGS": "",
        },
    )
    assert result.returncode == 2, result.stderr
    assert "Go module proxy" in result.stderr and "GOPROXY=off" in result.stderr
    assert f"{ETCD.module}@{ETCD.version}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not build.built(ETCD, tmp_path / "cp")


def test_a_stamp_from_before_the_recipe_is_kept_and_rewritten_with_it(tmp_path):
    """The cache built before the stamp recorded its recipe is not thrown away (a rebuild
    is ~40 min of CPU): it is taken as revision 1's and the stamp gains the recipe."""
    _stamp_built(tmp_path)
    stamp = build.bin_dir(HELM, tmp_path).parent / build.STAMP
    assert "recipe" not in json.loads(stamp.read_text())
    assert build.built(HELM, tmp_path)
    assert json.loads(stamp.read_text())["recipe"] == build.recipe(HELM)


def test_another_recipe_or_go_is_not_this_build(tmp_path):
    _stamp_built(tmp_path)
    stamp = build.bin_dir(ETCD, tmp_path).parent / build.STAMP
    stamp.write_text(json.dumps({"version": ETCD.version, "go": "go1.26.8", "recipe": "0" * 16}))
    assert not build.built(ETCD, tmp_path)
    stamp.write_text(json.dumps({"version": ETCD.version, "go": "go1.26.8",
                                 "recipe": build.recipe(ETCD)}))  # fmt: skip
    assert build.built(ETCD, tmp_path)
    assert build.built(ETCD, tmp_path, "go1.26.8")
    assert not build.built(ETCD, tmp_path, "go1.27.0")
    assert build.recipe(ETCD) != build.recipe(HELM)


def test_a_go_older_than_the_modules_go_line_is_refused_before_building():
    helm_mod = "module helm.sh/helm/v3\n\ngo 1.26.0\n\nrequire (\n)\n"
    with pytest.raises(build.BuildError, match=r"needs Go 1\.26\.0 or newer.*go1\.25\.3"):
        build._check_go(HELM, helm_mod, "go1.25.3")
    build._check_go(HELM, helm_mod, "go1.26.8")
    build._check_go(HELM, helm_mod, "devel go1.27-abc")  # not a release: go itself judges


def test_a_second_build_waits_for_the_first_one(tmp_path):
    """Two builds of one cache: the second waits on the lock file, then finds it built."""
    import fcntl
    import threading
    import time

    _stamp_built(tmp_path)
    said: list[str] = []
    builder = build.Builder(tmp_path, Path("/bin/false"), 1, said.append)
    with (tmp_path / build.LOCK).open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        second = threading.Thread(target=builder.build_all)
        second.start()
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said and "holds" in said[0] and "waiting" in said[0]
        assert second.is_alive()
        fcntl.flock(held, fcntl.LOCK_UN)
    second.join(10)
    assert not second.is_alive()
    assert all("already built" in s for s in said[1:]) and len(said) == 1 + len(COMPONENTS)


def test_a_killed_builder_takes_its_go_build_with_it(tmp_path):
    """A builder killed -9 (a CI job's hard timeout) leaves no go build behind: the go
    command asked for SIGTERM when its parent dies (PR_SET_PDEATHSIG, build.py)."""
    import signal
    import time

    go = tmp_path / "go"
    pid_file = tmp_path / "go.pid"
    go.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n")
    go.chmod(0o755)
    builder = (
        "import sys; from pathlib import Path; from simulator.controlplane import build; "
        f"build.Builder(Path({str(tmp_path)!r}), Path({str(go)!r}), 1, print)"
        f"._compile(['build'], Path({str(tmp_path)!r}), 1, 'fake')"
    )
    process = subprocess.Popen([sys.executable, "-c", builder], cwd=Path(__file__).parent.parent)
    try:
        deadline = time.monotonic() + 30
        while not pid_file.is_file() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline and process.poll() is None, "go never started"
            time.sleep(0.05)
        go_pid = int(pid_file.read_text())
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + 10
        while _alive(go_pid):
            assert time.monotonic() < deadline, f"go build (pid {go_pid}) outlived its builder"
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()
        if pid_file.is_file() and pid_file.read_text().strip():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running (a zombie, reaped by init shortly, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
