"""OS and module facts: os-release, containerd --version, lsmod, modinfo."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean
from wizard.facts.command import Command

# -- os-release ----------

_ASSIGNMENT = re.compile(r"^\s*([A-Z][A-Z0-9_]*)=(.*)$")


@dataclass
class OsRelease(Fact):
    id: str | None
    version_id: str | None
    name: str | None
    pretty_name: str | None
    id_like: list[str]
    version: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


@parser("os-release", "cat /etc/os-release")
def parse_os_release(text: str) -> OsRelease:
    text = clean(text, "os-release")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)
        if not match:
            continue
        key, raw = match.groups()
        try:
            parts = shlex.split(raw, comments=False)
        except ValueError:
            parts = [raw.strip().strip("\"'")]
        fields[key] = " ".join(parts) if parts else ""
    if "ID" not in fields and "NAME" not in fields:
        raise ParseError("os-release", "no ID= or NAME= line: not /etc/os-release output")
    return OsRelease(
        id=fields.get("ID"),
        version_id=fields.get("VERSION_ID"),
        name=fields.get("NAME"),
        pretty_name=fields.get("PRETTY_NAME"),
        id_like=fields.get("ID_LIKE", "").split(),
        version=fields.get("VERSION"),
        fields=fields,
    )


# -- containerd --version ----------

# `containerd --version` prints "containerd <package> <version> <revision>" (containerd's
# version/version.go, cmd/containerd). Upstream builds: "v2.1.4" and a git commit;
# distribution packages put their own version there and often no revision: Ubuntu
# "1.4.4-0ubuntu1~20.04.2" (nothing after it), Debian "1.5.4~ds1 1.5.4~ds1-1", Docker's
# containerd.io "1.7.27 05044ec0a9a7". The version is read as printed (without the leading
# v); major.minor.patch are its first three numbers, whatever suffix the packager added.
_CONTAINERD = re.compile(
    r"^containerd[ \t]+(?:(?P<module>[^\s\d][^\s]*)[ \t]+)?v?(?P<version>(?P<major>\d{1,9})\."
    r"(?P<minor>\d{1,9})\.(?P<patch>\d{1,9})[^\s]*)(?:[ \t]+(?P<revision>\S+))?[ \t]*$",
    re.MULTILINE,
)


@dataclass
class ContainerdVersion(Fact):
    version: str
    major: int
    minor: int
    patch: int
    revision: str | None
    module: str | None = None

    @property
    def triple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)


@parser("containerd-version")
def parse_containerd_version(text: str) -> ContainerdVersion:
    text = clean(text, "containerd-version")
    match = _CONTAINERD.search(text)
    if not match:
        raise ParseError(
            "containerd-version", "no 'containerd <package> <version> [<revision>]' line found"
        )
    major, minor, patch = (int(match[g]) for g in ("major", "minor", "patch"))
    return ContainerdVersion(
        version=match["version"],
        major=major,
        minor=minor,
        patch=patch,
        revision=match["revision"],
        module=match["module"],
    )


# The runtime's version line: preflight judges it, the lab's containerd answers it.
CONTAINERD_VERSION = Command(("containerd", "--version"), parse_containerd_version)


# -- lsmod

_LSMOD_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9_-]+)\s+(?P<size>\d+)\s+(?P<count>-?\d+)(?:\s+(?P<by>\S+))?\s*$"
)


@dataclass
class ModuleInfo(Fact):
    size: int
    used_by_count: int
    used_by: list[str]


@dataclass
class Lsmod(Fact):
    modules: dict[str, ModuleInfo]

    def loaded(self, name: str) -> bool:
        return name in self.modules


@parser("lsmod", "lsmod")
def parse_lsmod(text: str) -> Lsmod:
    text = clean(text, "lsmod")
    modules: dict[str, ModuleInfo] = {}
    for line in text.splitlines():
        match = _LSMOD_LINE.match(line.strip())
        if not match:
            continue
        by = [m for m in (match["by"] or "").split(",") if m and m not in ("-", "[permanent]")]
        modules[match["name"]] = ModuleInfo(int(match["size"]), int(match["count"]), by)
    if not modules:
        raise ParseError("lsmod", "no '<module> <size> <used-by count>' lines found")
    return Lsmod(modules)


# -- modinfo

_OUT_OF_TREE_DIRS = ("/updates/", "/extra/", "/weak-updates/", "/dkms/")


@dataclass
class ModInfo(Fact):
    filename: str | None
    version: str | None
    vermagic: str | None
    in_tree: bool | None
    name: str | None = None
    srcversion: str | None = None
    depends: list[str] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)


@parser("modinfo", "modinfo MODULE")
def parse_modinfo(text: str) -> ModInfo:
    text = clean(text, "modinfo")
    values: dict[str, str] = {}
    params: list[str] = []
    for line in text.splitlines():
        key, found, value = line.partition(":")
        if not found or not re.fullmatch(r"[a-z_]+", key.strip()):
            continue
        key, value = key.strip(), value.strip()
        if key == "parm":
            params.append(value.split(":", 1)[0].strip())
        else:
            values.setdefault(key, value)
    if "filename" not in values and "vermagic" not in values:
        raise ParseError("modinfo", "no 'filename:' or 'vermagic:' line: not modinfo output")
    filename = values.get("filename")
    return ModInfo(
        filename=filename,
        version=values.get("version"),
        vermagic=values.get("vermagic"),
        in_tree=module_in_tree(filename),
        name=values.get("name"),
        srcversion=values.get("srcversion"),
        depends=[d for d in values.get("depends", "").split(",") if d],
        parameters=params,
    )


def module_in_tree(filename: str | None) -> bool | None:
    """True for a module shipped with the kernel, False for updates/ or extra/ (out of tree)."""
    if not filename:
        return None
    if filename == "(builtin)":
        return True
    if any(part in filename for part in _OUT_OF_TREE_DIRS):
        return False
    if "/kernel/" in filename:
        return True
    return None
