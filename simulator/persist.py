"""A demo lab that comes back as it was: addresses, ports, keys and the simulated state.

`demo --state-dir D` killed and started again used to bring the lab up on new ports with
new host keys and factory-fresh hosts and cluster: the wizard saw a changed site file and
other machines, reset the join and the operator install, and then failed phase 9 because
the node labels had gone with the old lab. A lab kept in a state directory saves what it
is (the SSH and API ports, the host and client keys, every simulated host, the cluster's
objects, the helm releases) after every change it serves and when it stops, and a lab
started on that directory again takes it back, so the wizard resumes exactly where it
stopped.

The file is JSON: data, never code. (It was a pickle: a planted ``lab-state.pickle`` in a
shared state folder ran as the operator.) The lab's own objects are written as tagged
values (``to_data``) and rebuilt from them (``from_data``) only as the lab's dataclasses,
by name, never as any other class; and the file and its folder must belong to the user
and be writable by no one else (wizard/private.py, ``check_owned``), or the lab refuses
them. A file that cannot be read, or one saved for other nodes, peers or faults, is set
aside: the lab then starts fresh, and the wizard's identity checks reset what it recorded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import importlib
import json
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.host import HostState
from wizard.private import check_folder, check_owned

if TYPE_CHECKING:
    from simulator.lab import Lab

SAVED = "lab-state.json"
FORMAT = 3  # bump when the saved shape changes: an older file starts a fresh lab
MAX_SAVED_BYTES = 256 << 20  # a lab of 1000 nodes saves a few tens of MB
# The only classes a saved lab is rebuilt as: the lab's own, by module.
_LAB_MODULES = "simulator."


@dataclass
class Saved:
    """Everything a lab needs to come back as the same site."""

    nodes: int
    peers: int
    faults: tuple[str, ...]
    client_key: bytes  # OpenSSH private key
    host_keys: dict[str, bytes] = field(default_factory=dict)  # host name -> private key
    ssh_ports: dict[str, int] = field(default_factory=dict)  # host name -> port
    api_port: int = 0
    hosts: dict[str, HostState] = field(default_factory=dict)  # each LabHost's state
    objects: dict[Any, Any] = field(default_factory=dict)  # ClusterState.objects
    resource_version: int = 1
    releases: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT


def load(directory: Path, nodes: int, peers: int, faults: tuple[str, ...]) -> Saved | None:
    """The lab saved in ``directory`` for this shape of lab, or None (start fresh). A file
    or folder of another user, or one others may write, is refused (ForeignPathError)."""
    path = directory / SAVED
    if not path.is_file():
        return None
    check_folder(directory)
    check_owned(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_SAVED_BYTES + 1)
        saved = from_data(json.loads(raw)) if len(raw) <= MAX_SAVED_BYTES else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        saved = None
    if (
        not isinstance(saved, Saved)
        or saved.format != FORMAT
        or (saved.nodes, saved.peers, tuple(sorted(saved.faults)))
        != (nodes, peers, tuple(sorted(faults)))
    ):
        with contextlib.suppress(OSError):
            path.replace(path.with_suffix(".set-aside"))
        return None
    return saved


def save(directory: Path, saved: Saved) -> None:
    """Write atomically (temp file, fsync, rename), 0600."""
    path = directory / SAVED
    tmp = path.with_suffix(".tmp")
    data = json.dumps(to_data(saved), separators=(",", ":")).encode()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # never written through: a planted link or file is replaced
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def to_data(value: Any) -> Any:
    """``value`` as JSON data: containers, bytes and the lab's dataclasses tagged so that
    ``from_data`` rebuilds them as they were (a set stays a set, a tuple key a tuple)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return [to_data(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [to_data(v) for v in value]}
    if isinstance(value, set | frozenset):
        return {"set": [to_data(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[to_data(k), to_data(v)] for k, v in value.items()]}
    kind = type(value)
    if not kind.__module__.startswith(_LAB_MODULES):
        raise TypeError(f"the lab cannot save a {kind.__module__}.{kind.__qualname__}")
    name = f"{kind.__module__}:{kind.__qualname__}"
    if isinstance(value, Enum):
        return {"enum": name, "value": to_data(value.value)}
    if dataclasses.is_dataclass(value):
        return {"object": name, "attrs": {k: to_data(v) for k, v in vars(value).items()}}
    raise TypeError(f"the lab cannot save a {name}")


def from_data(data: Any) -> Any:
    """The value ``to_data`` wrote; only the lab's own dataclasses and enums are built."""
    if isinstance(data, list):
        return [from_data(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "b64" in data:
        return base64.b64decode(data["b64"], validate=True)
    if "tuple" in data:
        return tuple(from_data(v) for v in data["tuple"])
    if "set" in data:
        return {from_data(v) for v in data["set"]}
    if "dict" in data:
        return {from_data(k): from_data(v) for k, v in data["dict"]}
    if "enum" in data:
        return _lab_class(data["enum"], Enum)(from_data(data["value"]))
    if "object" in data:
        kind = _lab_class(data["object"], None)
        obj = object.__new__(kind)  # as it was saved: no __init__, no defaults re-rolled
        for key, value in data["attrs"].items():
            if not isinstance(key, str):
                raise TypeError("an attribute name is not a string")
            object.__setattr__(obj, key, from_data(value))
        return obj
    raise ValueError(f"unknown saved value with keys {sorted(data)[:4]}")


def _lab_class(name: Any, base: type | None) -> type:
    module, _, qualname = str(name).partition(":")
    if not module.startswith(_LAB_MODULES) or not qualname.isidentifier():
        raise TypeError(f"{name!r} is not one of the lab's classes")
    kind = getattr(importlib.import_module(module), qualname, None)
    if not isinstance(kind, type) or not (
        issubclass(kind, base) if base is not None else dataclasses.is_dataclass(kind)
    ):
        raise TypeError(f"{name!r} is not one of the lab's classes")
    return kind


def capture(lab: Lab) -> Saved:
    """What ``lab`` is now (the cluster copied under its lock: the API thread writes it)."""
    assert lab.api is not None and lab._client_key is not None
    with lab.cluster.lock:
        objects = copy.deepcopy(lab.cluster.objects)
        version = lab.cluster._rv
    return Saved(
        nodes=lab.nodes,
        peers=lab.peers,
        faults=tuple(lab.faults),
        client_key=lab._client_key.export_private_key(),
        host_keys={n: s.host_key.export_private_key() for n, s in lab.servers.items()},
        ssh_ports={n: s.port for n, s in lab.servers.items()},
        api_port=int(lab.api.httpd.server_address[1]),
        hosts={name: host.state for name, host in lab.hosts.items()},
        objects=objects,
        resource_version=version,
        releases=dict(lab.releases),
    )


async def keep_saving(lab: Lab, every_s: float) -> None:
    """Save whenever the simulated state changed (checked every ``every_s``), so that a
    killed demo loses at most that much: a host command, an API write, a helm release."""
    last = None
    while True:
        await asyncio.sleep(every_s)
        mark = (
            sum(len(h.commands) for h in lab.hosts.values()),
            lab.cluster._rv,
            len(lab.releases),
            tuple(h.state.boot_id for h in lab.hosts.values()),
        )
        if mark != last:
            last = mark
            with contextlib.suppress(OSError):  # a full disk: the next change tries again
                lab.save()
