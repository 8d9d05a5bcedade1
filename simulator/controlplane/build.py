"""``gpu-node-wizard lab --build-control-plane``: build the real control plane, once.

Each component (simulator/controlplane/versions.py) is built from its own Go module, as
fetched from the Go module proxy, in a generated build module in the cache folder: it
requires the component's module at its pinned version and copies the module's ``replace``
directives, turning the ones that point into the module's own monorepo (Kubernetes'
``./staging/src/k8s.io/*``, etcd's ``../api``) into the published versions of those modules
(a module zip from the proxy carries no nested modules). Nothing of those projects enters
this repository; the binaries land in ``<cache>/<component>-<version>/bin``, written last
so that an interrupted build is built again and a finished one never is.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from simulator.controlplane.versions import COMPONENTS, Component
from wizard.errors import WizardError

CACHE_ENV = "GNW_CONTROL_PLANE_CACHE"
GO_ENV = "GNW_GO"  # the go binary, when it is not on PATH nor in /usr/local/go/bin
JOBS_ENV = "GNW_GO_BUILD_JOBS"
STAMP = "BUILT.json"
LOCK = ".build.lock"
# The newest `go` line of the pinned modules' go.mod files (helm v3.22.0 and etcd v3.5.35
# declare go 1.26.0); each is checked again against the downloaded .mod before building.
GO_NEEDED = "1.26"


class BuildError(WizardError):
    """The control plane cannot be built here (no Go, no module proxy, a failed build)."""


Progress = Callable[[str], None]


def cache_root() -> Path:
    """Outside the repository: $GNW_CONTROL_PLANE_CACHE, or the per-user cache folder."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs

    return platformdirs.user_cache_path("gpu-node-wizard") / "control-plane"


def bin_dir(component: Component, root: Path | None = None) -> Path:
    return (root or cache_root()) / component.key / "bin"


# Raised whenever the build itself changes (the generated go.mod, the go commands, the
# environment): every cached build made by an older recipe is then built again.
RECIPE_REVISION = 1


def recipe(component: Component) -> str:
    """A digest of what makes this component's binaries: its module, version, packages,
    ldflags, sibling version, binary names and the build's own revision."""
    parts = {
        "revision": RECIPE_REVISION,
        "module": component.module,
        "version": component.version,
        "packages": list(component.packages),
        "ldflags": list(component.ldflags),
        "sibling_version": component.sibling_version,
        "binaries": list(component.binary_names()),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def built(component: Component, root: Path | None = None, go: str | None = None) -> bool:
    """True when this version's binaries are complete (the stamp is written after them)
    and were made by this recipe (and, when ``go`` is given, by that Go version: the
    builder asks so; a user of the binaries needs no Go).

    A stamp from before the recipe was recorded (revision 1 is the recipe those builds
    used) is taken as this recipe's and rewritten with it, so that the cached build is
    not thrown away for a format change."""
    folder = bin_dir(component, root)
    stamp_path = folder.parent / STAMP
    if not stamp_path.is_file() or not all(
        (folder / name).is_file() for name in component.binary_names()
    ):
        return False
    try:
        stamp = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("version", component.version) != component.version:
        return False
    if "recipe" not in stamp and RECIPE_REVISION == 1:
        stamp["recipe"] = recipe(component)
        with contextlib.suppress(OSError):  # a read-only cache is still a built one
            _write_stamp(stamp_path, stamp)
    if stamp.get("recipe") != recipe(component):
        return False
    return go is None or stamp.get("go") == go


def _write_stamp(path: Path, stamp: dict) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(stamp, indent=2) + "\n")
    partial.replace(path)


def binary(component: Component, name: str, root: Path | None = None) -> Path | None:
    path = bin_dir(component, root) / name
    return path if built(component, root) else None


def all_built(root: Path | None = None) -> bool:
    return all(built(c, root) for c in COMPONENTS)


def find_go() -> Path:
    """The go command: $GNW_GO, PATH, then Go's default install folder."""
    explicit = os.environ.get(GO_ENV)
    candidates = [explicit] if explicit else [shutil.which("go"), "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return Path(candidate)
    where = f"${GO_ENV}={explicit}" if explicit else "PATH and /usr/local/go/bin"
    raise BuildError(
        f"building the control plane needs Go ({GO_NEEDED} or newer); no go command in {where}. "
        "Install Go from your distribution or go.dev, or set GNW_GO to the go binary."
    )


def default_jobs() -> int:
    """Packages compiled at once (go build -p). The build is CPU-bound; on a machine shared
    with others the default is the core count but at most 2, overridable by the env var."""
    explicit = os.environ.get(JOBS_ENV, "")
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    return max(1, min(2, os.cpu_count() or 1))


@dataclass
class Builder:
    """Builds the components into the cache; idempotent (a built version is skipped)."""

    root: Path
    go: Path
    jobs: int
    progress: Progress

    @classmethod
    def here(cls, progress: Progress | None = None) -> Builder:
        return cls(cache_root(), find_go(), default_jobs(), progress or _print)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The pinned versions are built with this Go, never a toolchain it would download.
        env["GOTOOLCHAIN"] = "local"
        env["GOFLAGS"] = "-mod=mod"
        env.setdefault("CGO_ENABLED", "0")
        return env

    def build_all(self, components: tuple[Component, ...] = COMPONENTS) -> list[Path]:
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            return self._build_all(components)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One build at a time per cache: a second one waits (and then finds it built),
        rather than both writing one bin.partial."""
        with (self.root / LOCK).open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.progress(
                    f"another build of the control plane holds {self.root / LOCK}; waiting for it"
                )
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _build_all(self, components: tuple[Component, ...]) -> list[Path]:
        version = ""
        folders = []
        for index, component in enumerate(components, 1):
            label = f"[{index}/{len(components)}] {component.module}@{component.version}"
            # A build stamped with a Go version is current only for that Go (a stamp
            # without one predates the record: its binaries are kept).
            stamped = built(component, self.root) and _stamped_go(component, self.root)
            if stamped:
                version = version or self._go_version()
            if built(component, self.root, version if stamped else None):
                self.progress(f"{label}: already built in {bin_dir(component, self.root)}")
            else:
                started = time.monotonic()
                version = version or self._go_version()
                self._build(component, label, version)
                self.progress(
                    f"{label}: built in {time.monotonic() - started:.0f} s -> "
                    f"{bin_dir(component, self.root)}"
                )
            folders.append(bin_dir(component, self.root))
        return folders

    # -- steps -------------------------------------------------------------------------------

    def _go_version(self) -> str:
        result = self._go(["env", "GOVERSION"], cwd=self.root)
        return result.stdout.strip()

    def _build(self, component: Component, label: str, go_version: str) -> None:
        work = self.root / "src" / component.key
        work.mkdir(parents=True, exist_ok=True)
        self.progress(f"{label}: fetching the module from the Go module proxy")
        info = self._download(component, work)
        upstream = Path(info["GoMod"]).read_text()
        _check_go(component, upstream, go_version)
        (work / "go.mod").write_text(build_module(component, upstream))
        (work / "go.sum").touch()
        self.progress(f"{label}: resolving its dependencies")
        self._go(["get", *(f"{p}@{component.version}" for p in component.packages)], cwd=work)
        total = len(self._go(["list", "-deps", *component.packages], cwd=work).stdout.split())
        staging = work / "bin.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        ldflags = " ".join(("-s", "-w", *component.ldflags))
        names = component.binary_names()
        # `-o DIR/` names each binary after its package's last element; one package with a
        # name of its own (etcd's main is .../server/v3) gets its file name instead.
        out = str(staging / names[0]) if len(component.packages) == 1 else str(staging) + "/"
        command = ["build", "-trimpath", "-p", str(self.jobs), "-v", "-ldflags", ldflags,
                   "-o", out, *component.packages]  # fmt: skip
        self.progress(
            f"{label}: compiling {total} packages with {self.go.name} build -p {self.jobs}"
        )
        self._compile(command, work, total, label)
        target = bin_dir(component, self.root)
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
        stamp = {"module": component.module, "version": component.version, "go": go_version,
                 "recipe": recipe(component), "binaries": list(names)}  # fmt: skip
        _write_stamp(target.parent / STAMP, stamp)

    def _download(self, component: Component, work: Path) -> dict:
        ref = f"{component.module}@{component.version}"
        result = self._go(["mod", "download", "-json", ref], cwd=work, check=False)
        try:
            info = json.loads(result.stdout or "{}")
        except ValueError:
            info = {}
        if result.returncode != 0 or info.get("Error") or "GoMod" not in info:
            proxy = self.env().get("GOPROXY") or self._go(["env", "GOPROXY"], cwd=work).stdout
            reason = info.get("Error") or _last_line(result.stderr) or "no answer"
            raise BuildError(
                f"cannot fetch {ref} from the Go module proxy (GOPROXY={proxy.strip()}): "
                f"{reason}. The build needs the module proxy (or a GOPROXY/GOFLAGS=-mod=vendor "
                "setup that serves these modules)."
            )
        return info

    def _compile(self, command: list[str], work: Path, total: int, label: str) -> None:
        process = subprocess.Popen(
            [str(self.go), *command],
            cwd=work,
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_lower_priority,
        )
        assert process.stderr is not None
        done, last, tail = 0, time.monotonic(), []
        for line in process.stderr:
            line = line.rstrip("\n")
            if re.fullmatch(r"[\w./~+-]+", line):  # `go build -v`: a package it compiled
                done += 1
            else:
                tail.append(line)
                tail = tail[-40:]
            if time.monotonic() - last >= 15:
                last = time.monotonic()
                self.progress(f"{label}: compiled {done} of at most {total} packages")
        if process.wait() != 0:
            raise BuildError(f"{label}: go build failed:\n" + "\n".join(tail[-20:]))

    def _go(self, args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.go), *args], cwd=cwd, env=self.env(), capture_output=True, text=True
        )
        if check and result.returncode != 0:
            text = result.stderr.strip()
            if _is_network(text):
                raise BuildError(
                    f"go {args[0]}: the Go module proxy is unreachable: {_last_line(text)}"
                )
            raise BuildError(f"go {' '.join(args[:2])} failed in {cwd}:\n{text[-2000:]}")
        return result


def _stamped_go(component: Component, root: Path) -> str | None:
    try:
        return json.loads((bin_dir(component, root).parent / STAMP).read_text()).get("go")
    except (OSError, ValueError, AttributeError):
        return None


def _go_tuple(text: str) -> tuple[int, ...] | None:
    """go1.26.8 / 1.26.0 / 1.26 as numbers; None for a development or odd version."""
    found = re.fullmatch(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+))?\S*", text.strip())
    return tuple(int(g or 0) for g in found.groups()) if found else None


def _check_go(component: Component, upstream_go_mod: str, go_version: str) -> None:
    """The module's go.mod `go` line is the oldest Go that builds it (GOTOOLCHAIN=local:
    Go refuses, mid-way, rather than download a newer one): said before building."""
    line = re.search(r"^go (\S+)", upstream_go_mod, re.M)
    needed = _go_tuple(line.group(1)) if line else None
    have = _go_tuple(go_version)
    if needed and have and have < needed:
        raise BuildError(
            f"{component.module}@{component.version} needs Go {line.group(1)} or newer (its "
            f"go.mod says `go {line.group(1)}`); this go is {go_version}. Install a newer Go "
            "(go.dev/dl) or set GNW_GO to one."
        )


def build_module(component: Component, upstream_go_mod: str) -> str:
    """The generated go.mod: the component's module required at its version, and its own
    replace directives, with local paths turned into the published sibling modules."""
    go_line = re.search(r"^go (\S+)", upstream_go_mod, re.M)
    required = dict(re.findall(r"^\s+(\S+) (v\S+)", _block(upstream_go_mod, "require"), re.M))
    for single in re.findall(r"^require (\S+) (v\S+)", upstream_go_mod, re.M):
        required[single[0]] = single[1]
    lines = [f"module gnw.local/build/{component.name}", ""]
    lines += [f"go {go_line.group(1) if go_line else GO_NEEDED}", ""]
    lines += [f"require {component.module} {component.version}", "", "replace ("]
    for old, new in _replaces(upstream_go_mod):
        if new.startswith((".", "/")):  # a sibling in the module's own repository
            if old not in required:
                continue  # a guard against an import (etcd's ./FORBIDDEN_DEPENDENCY)
            version = required[old]
            if version.startswith("v0.0.0") and component.sibling_version:
                version = component.sibling_version
            new = f"{old} {version}"
        lines.append(f"\t{old} => {new}")
    lines.append(")")
    return "\n".join(lines) + "\n"


def _block(text: str, keyword: str) -> str:
    return "\n".join(re.findall(rf"^{keyword} \((.*?)^\)", text, re.M | re.S))


def _replaces(text: str) -> list[tuple[str, str]]:
    pairs = []
    body = _block(text, "replace") + "\n" + "\n".join(re.findall(r"^replace (.*)$", text, re.M))
    for line in body.splitlines():
        line = line.split("//", 1)[0].strip()
        if "=>" in line:
            old, new = (part.strip() for part in line.split("=>", 1))
            pairs.append((old.split()[0], new))
    return pairs


def _is_network(text: str) -> bool:
    return any(
        word in text
        for word in (
            "dial tcp",
            "no such host",
            "proxyconnect",
            "GOPROXY=off",
            "i/o timeout",
            "connection refused",
            "TLS handshake",
        )
    )


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _lower_priority() -> None:
    """In the go command, before exec: the build shares the machine, so it yields to
    interactive work, and it ends (SIGTERM) when the builder's process does (prctl(2)
    PR_SET_PDEATHSIG), so a killed builder (a CI job's hard timeout) leaves no go build
    holding the cores."""
    os.nice(10)
    with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere go outlives it
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _print(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def missing_reason(root: Path | None = None) -> str | None:
    """Why the real control plane cannot be used here, or None when it is built."""
    missing = [c.key for c in COMPONENTS if not built(c, root)]
    if not missing:
        return None
    return (
        f"the real control plane is not built ({', '.join(missing)} missing in "
        f"{root or cache_root()}): run `gpu-node-wizard lab --build-control-plane`"
    )
