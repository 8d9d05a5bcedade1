"""The lab host's bond and whoever manages it: NetworkManager (RHEL 10), systemd-networkd
(Ubuntu 24.04 server through netplan), and what Intel's out-of-tree ice does to RDMA when
the bond changes. ``HostNetwork``, a collaborator of ``LabHost`` (simulator/host/).

Sources:
- NetworkManager (src/core/devices/nm-device.c ``device_recheck_port_status``,
  src/core/nm-policy.c): a port released behind NM's back (``ip link set P nomaster``) is
  deactivated with reason CONNECTION_ASSUMED, which does not block autoconnect, so NM
  activates the port profile again and re-attaches it; ``nmcli connection down PROFILE``
  blocks autoconnect until ``nmcli connection up PROFILE`` (man nmcli).
- systemd-networkd: no re-attach on its own; ``networkctl reconfigure PORT`` applies the
  .network again, ``Bond=`` included (man networkctl).
- Intel OOT ice (src/ice_lag.c ``ice_lag_link``/``ice_lag_chk_rdma``) and the ice/irdma
  READMEs, "Link Aggregation and RDMA": bonding the two ports of one E810 unplugs the RDMA
  aux device and plugs it again on the primary port (a re-registered ib_device: rdma_cm's
  per-device ``default_roce_tos`` is zeroed, drivers/infiniband/core/cma.c ``cma_add_one``
  kcalloc; irdma's configfs group points at the old device and must be made again); the
  two ports' DCB must match before bonding ("Found netdev %s with different DCB config"),
  or RDMA stays off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.host import Port, Result
    from simulator.host.machine import HostState


class HostNetwork:
    """Bond membership, its manager and the RDMA re-registration that follows it, on the
    host's state."""

    def __init__(self, state: HostState) -> None:
        self.state = state

    def _manager(self) -> str:
        return "networkd" if self.state.os.startswith("ubuntu") else "NetworkManager"

    def profile(self, port: Port) -> str:
        return f"{self.state.bond_name}-port{self.state.ports.index(port) + 1}"

    def nm_connections(self) -> list[tuple[str, str, str, Port, bool]]:
        """NetworkManager's profiles in D-Bus order: (NAME, UUID, TYPE, device, bond port).
        nmcli(1) selects a profile by ``id`` (its name, the default) or ``uuid``; names need
        not be unique. NetworkManager src/nmcli/common.c ``nmc_find_connection``: an id
        matches every profile of that name and the first one found is used (only ``uuid``
        and ``path`` must match uniquely); ``nmc_find_active_connection`` collects every
        active one of the name, and ``connection down`` deactivates them all
        (src/nmcli/connections.c do_connection_down). With the fault nm-duplicate-profile an
        old standalone ethernet profile of the port profile's name comes first."""
        import uuid

        rows = []
        for port in self.state.ports:
            name = self.profile(port)
            if "nm-duplicate-profile" in self.state.faults:
                stale = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.state.name}/{name}/stale"))
                rows.append((name, stale, "802-3-ethernet", port, False))
            own = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.state.name}/{name}"))
            rows.append((name, own, "802-3-ethernet", port, True))
        return rows

    def _nm_active(self, row: tuple[str, str, str, Port, bool]) -> bool:
        """Whether the profile is active: the port's bond profile while the port is in the
        bond through it, a standalone one while the port is up outside the bond by it."""
        _, _, _, port, bond_port = row
        return port.nm_profile_active and (port.nm_standalone != bond_port)

    def set_enslaved(self, port: Port, enslaved: bool) -> None:
        """A port joins or leaves the bond; the RDMA device follows the bond (OOT LAG)."""
        if port.enslaved == enslaved:
            return
        port.enslaved = enslaved
        if enslaved:
            self.state.kernel_log.append(
                f"{self.state.bond_name}: (slave {port.name}): Enslaving as a backup interface with an up link"
            )
        else:
            self.state.kernel_log.append(
                f"{self.state.bond_name}: (slave {port.name}): Releasing backup interface"
            )
        self.reregister_rdma()

    def form_bond(self) -> None:
        """At boot, once the network is up: both ports join (after the early boot units)."""
        for port in self.state.ports:
            self.set_enslaved(port, True)
            port.admin_up = True

    def reregister_rdma(self) -> None:
        """The irdma device is unplugged and plugged again: configfs state is lost."""
        first, second = self.state.ports[0], self.state.ports[1]
        self.state.lag_rdma_ok = True
        if first.enslaved and second.enslaved and first.dcb.config() != second.dcb.config():
            self.state.kernel_log.append(self.state.lag_dcb_refusal())
            self.state.lag_rdma_ok = False
        for path in list(self.state.configfs):
            if path.startswith("/sys/kernel/config/irdma/"):
                del self.state.configfs[path]  # the group points at the old device
            elif path.endswith("/default_roce_tos"):
                self.state.configfs[path] = "0\n"  # cma_add_one: a fresh, zeroed cma_device

    # -- ip link under a manager -------------------------------------------------------------

    def link_master(self, port: Port, enslave: bool) -> None:
        """`ip link set P nomaster|master BOND`: NM puts a released port back."""
        if not enslave and self._manager() == "NetworkManager" and port.nm_profile_active:
            self.state.kernel_log.append(
                f"NetworkManager: device ({port.name}): released from controller device {self.state.bond_name}"
            )
            self.set_enslaved(port, False)
            # nm-policy: CONNECTION_ASSUMED does not block autoconnect: activated again.
            self.set_enslaved(port, True)
            return
        self.set_enslaved(port, enslave)

    # -- NetworkManager ------------------------------------------------------------------------

    def cmd_nmcli(self, args: list[str]) -> Result:
        from simulator.host import Result

        if self._manager() != "NetworkManager":
            return Result(stderr="bash: line 1: nmcli: command not found\n", exit_status=127)
        words = [a for a in args if a not in ("-t", "--terse")]
        fields = None
        if words[:1] in (["-f"], ["-g"]):
            fields, words = words[1], words[2:]
        if words[:2] == ["device", "status"]:
            rows = [(self.state.bond_name, "bond", "connected", self.state.bond_name)]
            for port in self.state.ports:
                active = port.nm_profile_active
                rows.append((port.name, "ethernet", "connected" if active else "disconnected",
                             self.profile(port) if active else ""))  # fmt: skip
            columns = {"DEVICE": 0, "TYPE": 1, "STATE": 2, "CONNECTION": 3}
            wanted = [columns[f] for f in (fields or "DEVICE,TYPE,STATE,CONNECTION").split(",")]
            return Result("".join(":".join(row[i] for i in wanted) + "\n" for row in rows))
        if words[:2] == ["device", "show"] and len(words) == 3:
            port = self.state.port(words[2])
            if port is None:
                return Result(stderr=f"Error: Device '{words[2]}' not found.\n", exit_status=10)
            return Result((self.profile(port) if port.nm_profile_active else "") + "\n")
        if words[:2] == ["connection", "show"] and len(words) == 2:
            # nmcli(1) terse output: fields joined by ':', a ':' or '\' in a value escaped
            # with '\' (src/nmcli/utils.c escape_values); DEVICE only for active profiles.
            columns = {"NAME": 0, "UUID": 1, "TYPE": 2, "DEVICE": 3}
            wanted = [columns[f] for f in (fields or "NAME,UUID,TYPE,DEVICE").split(",")]
            lines = []
            for row in self.nm_connections():
                name, uid, kind, port, _ = row
                values = (name, uid, kind, port.name if self._nm_active(row) else "")
                escaped = [v.replace("\\", "\\\\").replace(":", "\\:") for v in values]
                lines.append(":".join(escaped[i] for i in wanted) + "\n")
            return Result("".join(lines))
        if words[:2] in (["connection", "down"], ["connection", "up"]) and len(words) in (3, 4):
            return self._nm_up_down(words[1] == "up", words[2:])
        return Result(
            stderr=f"Error: argument '{' '.join(words)}' not understood.\n", exit_status=2
        )

    def _nm_up_down(self, up: bool, selector: list[str]) -> Result:
        """`nmcli connection up|down [id|uuid] ID` as nmcli resolves it (see nm_connections)."""
        from simulator.host import Result

        kind, value = (selector[0], selector[1]) if len(selector) == 2 else ("id", selector[0])
        if kind not in ("id", "uuid"):
            return Result(stderr=f"Error: unknown connection '{kind}'.\n", exit_status=10)
        rows = [r for r in self.nm_connections() if r[1 if kind == "uuid" else 0] == value]
        if not rows:
            return Result(stderr=f"Error: unknown connection '{value}'.\n", exit_status=10)
        if up:
            name, _, _, port, bond_port = rows[0]  # the first of a name, in D-Bus order
            port.nm_profile_active, port.nm_standalone = True, not bond_port
            self.set_enslaved(port, bond_port)
            port.admin_up = True
            return Result("Connection successfully activated (D-Bus active path: "
                          f"/org/freedesktop/NetworkManager/ActiveConnection/{4 + self.state.ports.index(port)})\n")  # fmt: skip
        active = [r for r in rows if self._nm_active(r)]
        if not active:
            return Result(stderr=f"Error: '{value}' is not an active connection.\n"
                          "Error: no active connection provided.\n", exit_status=10)  # fmt: skip
        out = []
        for name, _, _, port, _ in active:
            port.nm_profile_active, port.nm_standalone = False, False
            self.set_enslaved(port, False)
            out.append(f"Connection '{name}' successfully deactivated (D-Bus active path: "
                       f"/org/freedesktop/NetworkManager/ActiveConnection/{4 + self.state.ports.index(port)})\n")  # fmt: skip
        return Result("".join(out))

    # -- systemd-networkd ------------------------------------------------------------------------

    def cmd_networkctl(self, args: list[str]) -> Result:
        from simulator.host import Result

        if self._manager() != "networkd":
            return Result(stderr="bash: line 1: networkctl: command not found\n", exit_status=127)
        words = [a for a in args if not a.startswith("--")]
        if words[:1] == ["list"]:
            lines = ["  1 lo        loopback unmanaged  unmanaged"]
            for i, port in enumerate(self.state.ports):
                lines.append(f"  {4 + i} {port.name} ether    enslaved  configured")
            lines.append(f"  6 {self.state.bond_name}     bond     routable  configured")
            return Result("\n".join(lines) + "\n")
        if words[:1] == ["reconfigure"]:
            for name in words[1:]:
                port = self.state.port(name)
                if port is None:
                    return Result(
                        stderr=f'Failed to resolve interface "{name}": No such device\n',
                        exit_status=1,
                    )
                port.admin_up = True
                self.set_enslaved(port, True)  # Bond= in its .network file
            return Result()
        return Result(stderr=f"Unknown command verb '{' '.join(words)}'.\n", exit_status=1)
