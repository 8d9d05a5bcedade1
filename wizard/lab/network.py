"""The lab host's bond and whoever manages it: NetworkManager (RHEL 10), systemd-networkd
(Ubuntu 24.04 server through netplan), and what Intel's out-of-tree ice does to RDMA when
the bond changes. A mixin of ``LabHost`` (wizard/lab/host/).

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
    from wizard.lab.host import LabHost, Port, Result


class NetworkMixin:
    """Bond membership, its manager and the RDMA re-registration that follows it."""

    def _manager(self: LabHost) -> str:
        return "networkd" if self.os.startswith("ubuntu") else "NetworkManager"

    def profile(self: LabHost, port: Port) -> str:
        return f"{self.bond_name}-port{self.ports.index(port) + 1}"

    def set_enslaved(self: LabHost, port: Port, enslaved: bool) -> None:
        """A port joins or leaves the bond; the RDMA device follows the bond (OOT LAG)."""
        if port.enslaved == enslaved:
            return
        port.enslaved = enslaved
        if enslaved:
            self.kernel_log.append(
                f"{self.bond_name}: (slave {port.name}): Enslaving as a backup interface with an up link"
            )
        else:
            self.kernel_log.append(
                f"{self.bond_name}: (slave {port.name}): Releasing backup interface"
            )
        self.reregister_rdma()

    def form_bond(self: LabHost) -> None:
        """At boot, once the network is up: both ports join (after the early boot units)."""
        for port in self.ports:
            self.set_enslaved(port, True)
            port.admin_up = True

    def reregister_rdma(self: LabHost) -> None:
        """The irdma device is unplugged and plugged again: configfs state is lost."""
        first, second = self.ports[0], self.ports[1]
        self.lag_rdma_ok = True
        if first.enslaved and second.enslaved and first.dcb.config() != second.dcb.config():
            self.kernel_log.append(
                f"ice {first.slot}: Found netdev {second.name} with different DCB config"
            )
            self.lag_rdma_ok = False
        for path in list(self.configfs):
            if path.startswith("/sys/kernel/config/irdma/"):
                del self.configfs[path]  # the group points at the old device
            elif path.endswith("/default_roce_tos"):
                self.configfs[path] = "0\n"  # cma_add_one: a fresh, zeroed cma_device

    # -- ip link under a manager -------------------------------------------------------------

    def link_master(self: LabHost, port: Port, enslave: bool) -> None:
        """`ip link set P nomaster|master BOND`: NM puts a released port back."""
        if not enslave and self._manager() == "NetworkManager" and port.nm_profile_active:
            self.kernel_log.append(
                f"NetworkManager: device ({port.name}): released from controller device {self.bond_name}"
            )
            self.set_enslaved(port, False)
            # nm-policy: CONNECTION_ASSUMED does not block autoconnect: activated again.
            self.set_enslaved(port, True)
            return
        self.set_enslaved(port, enslave)

    # -- NetworkManager ------------------------------------------------------------------------

    def cmd_nmcli(self: LabHost, args: list[str]) -> Result:
        from wizard.lab.host import Result

        if self._manager() != "NetworkManager":
            return Result(stderr="bash: line 1: nmcli: command not found\n", exit_status=127)
        words = [a for a in args if a not in ("-t", "--terse")]
        fields = None
        if words[:1] in (["-f"], ["-g"]):
            fields, words = words[1], words[2:]
        if words[:2] == ["device", "status"]:
            rows = [(self.bond_name, "bond", "connected", self.bond_name)]
            for port in self.ports:
                active = port.nm_profile_active
                rows.append((port.name, "ethernet", "connected" if active else "disconnected",
                             self.profile(port) if active else ""))  # fmt: skip
            columns = {"DEVICE": 0, "TYPE": 1, "STATE": 2, "CONNECTION": 3}
            wanted = [columns[f] for f in (fields or "DEVICE,TYPE,STATE,CONNECTION").split(",")]
            return Result("".join(":".join(row[i] for i in wanted) + "\n" for row in rows))
        if words[:2] == ["device", "show"] and len(words) == 3:
            port = self._port(words[2])
            if port is None:
                return Result(stderr=f"Error: Device '{words[2]}' not found.\n", exit_status=10)
            return Result((self.profile(port) if port.nm_profile_active else "") + "\n")
        if words[:2] in (["connection", "down"], ["connection", "up"]) and len(words) == 3:
            port = next((p for p in self.ports if self.profile(p) == words[2]), None)
            if port is None:
                return Result(stderr=f"Error: unknown connection '{words[2]}'.\n", exit_status=10)
            up = words[1] == "up"
            if not up and not port.nm_profile_active:
                return Result(stderr=f"Error: '{words[2]}' is not an active connection.\n"
                              "Error: no active connection provided.\n", exit_status=10)  # fmt: skip
            port.nm_profile_active = up
            self.set_enslaved(port, up)
            if up:
                port.admin_up = True
                return Result("Connection successfully activated (D-Bus active path: "
                              f"/org/freedesktop/NetworkManager/ActiveConnection/{4 + self.ports.index(port)})\n")  # fmt: skip
            return Result(f"Connection '{words[2]}' successfully deactivated (D-Bus active path: "
                          f"/org/freedesktop/NetworkManager/ActiveConnection/{4 + self.ports.index(port)})\n")  # fmt: skip
        return Result(
            stderr=f"Error: argument '{' '.join(words)}' not understood.\n", exit_status=2
        )

    # -- systemd-networkd ------------------------------------------------------------------------

    def cmd_networkctl(self: LabHost, args: list[str]) -> Result:
        from wizard.lab.host import Result

        if self._manager() != "networkd":
            return Result(stderr="bash: line 1: networkctl: command not found\n", exit_status=127)
        words = [a for a in args if not a.startswith("--")]
        if words[:1] == ["list"]:
            lines = ["  1 lo        loopback unmanaged  unmanaged"]
            for i, port in enumerate(self.ports):
                lines.append(f"  {4 + i} {port.name} ether    enslaved  configured")
            lines.append(f"  6 {self.bond_name}     bond     routable  configured")
            return Result("\n".join(lines) + "\n")
        if words[:1] == ["reconfigure"]:
            for name in words[1:]:
                port = self._port(name)
                if port is None:
                    return Result(
                        stderr=f'Failed to resolve interface "{name}": No such device\n',
                        exit_status=1,
                    )
                port.admin_up = True
                self.set_enslaved(port, True)  # Bond= in its .network file
            return Result()
        return Result(stderr=f"Unknown command verb '{' '.join(words)}'.\n", exit_status=1)
