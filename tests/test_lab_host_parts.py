"""A lab host is its state and collaborators with one subject each (simulator/host/): each is
given the state and only the collaborators it talks to, never the whole host, and a host
rebuilt around a saved state answers as the one that was saved."""

from __future__ import annotations

from simulator import persist
from simulator.host import HostState, LabHost


def _host() -> LabHost:
    return LabHost("gpu-1", "gpu", "10.10.0.21", "192.168.50.21")


def test_no_collaborator_holds_the_whole_host():
    host = _host()
    parts = [host.dispatch, *host.dispatch.answering]
    assert {type(p) for p in host.dispatch.answering} == set(LabHost.ANSWERING)
    for part in parts:
        held = list(vars(part).values())
        assert not [v for v in held if isinstance(v, LabHost)], type(part).__name__
        assert all(v is host.state for v in held if isinstance(v, HostState))
    # The few it talks to, by name: the rest of the host is out of its reach.
    assert set(vars(host.nic)) == {"state", "network"}
    assert set(vars(host.filesystem)) == {"state", "nic", "kmod"}
    for alone in (host.system, host.pci, host.rdma, host.network, host.kmod):
        assert set(vars(alone)) == {"state"}, type(alone).__name__


def test_a_host_rebuilt_around_its_saved_state_answers_the_same():
    host = _host()
    host.execute("modprobe -r irdma")
    host.execute("ethtool --set-priv-flags ens5f0np0 fw-lldp-agent off")
    saved = persist.from_data(persist.to_data(host.state))
    again = LabHost.from_state(saved)
    for command in ("lsmod", "ethtool --show-priv-flags ens5f0np0", "cat /etc/machine-id"):
        assert again.execute(command) == host.execute(command), command
    assert again.state.boot_id == host.state.boot_id and again.commands == host.commands


def test_a_command_reaches_the_state_the_facade_shows():
    host = _host()
    host.execute("tee -a /etc/x.conf", "one\n")
    assert host.files["/etc/x.conf"] == "one\n" and host.files is host.state.files
    host.reboot()
    assert host.state.boot_id in host.execute("cat /proc/sys/kernel/random/boot_id").stdout
