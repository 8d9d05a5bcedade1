"""A demo lab that comes back as it was: addresses, ports, keys and the simulated state.

`demo --state-dir D` killed and started again used to bring the lab up on new ports with
new host keys and factory-fresh hosts and cluster: the wizard saw a changed site file and
other machines, reset the join and the operator install, and then failed phase 9 because
the node labels had gone with the old lab. A lab kept in a state directory saves what it
is (the SSH and API ports, the host and client keys, every simulated host, the cluster's
objects, the helm releases) after every change it serves and when it stops, and a lab
started on that directory again takes it back, so the wizard resumes exactly where it
stopped.

The file is a pickle of the lab's own objects: they are the simulation's state, written
and read only by the lab, in the user's state directory (the file 0600, its folder 0700).
A file that cannot be read, or one saved for other nodes, peers or faults, is set aside:
the lab then starts fresh, and the wizard's identity checks reset what it recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wizard.lab.host import LabHost

if TYPE_CHECKING:
    from wizard.lab.lab import Lab

SAVED = "lab-state.pickle"
FORMAT = 1  # bump when the saved shape changes: an older file starts a fresh lab


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
    hosts: dict[str, LabHost] = field(default_factory=dict)
    objects: dict[Any, Any] = field(default_factory=dict)  # ClusterState.objects
    resource_version: int = 1
    releases: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT


def load(directory: Path, nodes: int, peers: int, faults: tuple[str, ...]) -> Saved | None:
    """The lab saved in ``directory`` for this shape of lab, or None (start fresh)."""
    path = directory / SAVED
    if not path.is_file():
        return None
    try:
        saved = pickle.loads(path.read_bytes())
    except Exception:
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
    data = pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def capture(lab: Lab) -> Saved:
    """What ``lab`` is now (the cluster copied under its lock: the API thread writes it)."""
    assert lab.api is not None and lab._client_key is not None
    with lab.cluster.lock:
        objects = pickle.loads(pickle.dumps(lab.cluster.objects))
        version = lab.cluster._rv
    return Saved(
        nodes=lab.nodes,
        peers=lab.peers,
        faults=tuple(lab.faults),
        client_key=lab._client_key.export_private_key(),
        host_keys={n: s.host_key.export_private_key() for n, s in lab.servers.items()},
        ssh_ports={n: s.port for n, s in lab.servers.items()},
        api_port=int(lab.api.httpd.server_address[1]),
        hosts=dict(lab.hosts),
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
            tuple(h.boot_id for h in lab.hosts.values()),
        )
        if mark != last:
            last = mark
            with contextlib.suppress(OSError):  # a full disk: the next change tries again
                lab.save()
