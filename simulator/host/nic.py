"""A lab host's E810 ports and bond1 as the network tools show and change them: ``ethtool``
(driver, statistics, the fw-lldp-agent private flag), ``ip`` (addresses, the bond's
details, ``link set``), /proc/net/bonding and ``dcb`` (through the driver model in
simulator/dcb.py). Who manages the bond is simulator/network.py."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from simulator.dcb import DcbTool
from simulator.host.model import E810_FIRMWARE, OOT_ICE_VERSION, Result

if TYPE_CHECKING:
    from simulator.host.machine import HostState
    from simulator.network import HostNetwork


class HostNic:
    """The ports, the bond and their DCB, in ethtool's, iproute2's and bonding's formats.
    Who puts a port into the bond or takes it out is ``network`` (its manager)."""

    def __init__(self, state: HostState, network: HostNetwork) -> None:
        self.state = state
        self.network = network

    def cmd_ethtool(self, args: list[str]) -> Result:
        if len(args) < 2 or args[0] not in ("-i", "-S", "--show-priv-flags", "--set-priv-flags"):
            return Result(stderr="ethtool: bad command line argument(s)\n", exit_status=1)
        port = self.state.port(args[1])
        if port is None:
            return Result(stderr="Cannot get driver information: No such device\n", exit_status=71)
        if args[0] == "-i":
            version = self.state.kernel if self.state.in_tree else OOT_ICE_VERSION
            return Result(
                f"driver: ice\nversion: {version}\nfirmware-version: {E810_FIRMWARE}\n"
                f"expansion-rom-version: \nbus-info: {port.slot}\nsupports-statistics: yes\n"
                "supports-test: yes\nsupports-eeprom-access: yes\nsupports-register-dump: yes\n"
                "supports-priv-flags: yes\n"
            )
        if args[0] == "-S":
            lines = ["NIC statistics:", "     rx_unicast: 183274", "     tx_unicast: 99120"]
            # ice's port-level drop and error counters (ethtool-s fixture 01.txt names).
            lines += [f"     {name}: {port.drops.get(name, 0)}"
                      for name in ("rx_dropped.nic", "rx_crc_errors.nic", "rx_length_errors.nic")]  # fmt: skip
            for direction, counts in (("tx", port.pause_tx), ("rx", port.pause_rx)):
                for prio in range(8):
                    lines.append(f"     {direction}_priority_{prio}_xon.nic: 0")
                    lines.append(f"     {direction}_priority_{prio}_xoff.nic: {counts[prio]}")
            return Result("\n".join(lines) + "\n")
        if args[0] == "--show-priv-flags":
            return Result(
                f"Private flags for {port.name}:\n"
                "link-down-on-close     : off\n"
                f"fw-lldp-agent          : {'on' if port.lldp_agent else 'off'}\n"
                "channel-inline-flow-director: off\n"
                "channel-pkt-inspect-optimize: on\n"
                "mdd-auto-reset-vf      : off\n"
                "vf-vlan-pruning        : off\n"
                "vf-true-promisc-support: off\n"
            )
        if args[2:] == ["fw-lldp-agent", "off"]:
            if port.lldp_agent:
                # ice_ethtool.c ice_set_priv_flags: stopping the firmware agent runs
                # ice_init_pf_dcb(pf, true), which finds FW LLDP off, sets VLAN PFC mode and
                # loads the software default (ice_dcb_lib.c ice_dcb_sw_dflt_cfg: one TC, no
                # PFC, no APP entries): what DCBX had set is gone.
                self.state.kernel_log.append(
                    f"ice {port.slot}: FW LLDP is disabled, DCBx/LLDP in SW mode."
                )
                port.dcb.reset()
            port.lldp_agent = False
        elif args[2:] == ["fw-lldp-agent", "on"]:
            if port.dcb.dscp_mode:
                # Intel's out-of-tree ice (src/ice_ethtool.c ice_set_priv_flags): "QoS in L3
                # DSCP mode, FW Agent not allowed to start", -EOPNOTSUPP; ethtool's netlink
                # path (netlink/nlsock.c) prints the errno and exits 1. So a rollback turns
                # the agent on only after the last DSCP entry is gone.
                self.state.kernel_log.append(
                    f"ice {port.slot}: QoS in L3 DSCP mode, FW Agent not allowed to start"
                )
                return Result(stderr="netlink error: Operation not supported\n", exit_status=1)
            port.lldp_agent = True
        return Result()

    def _bond_details(self) -> str:
        """``ip -d link show bond1`` as iproute2 prints a bond (ip/iplink_bond.c)."""
        mac = self.state.ports[0].mac if self.state.ports else "00:00:00:00:00:00"
        return (
            f"6: {self.state.bond_name}: <BROADCAST,MULTICAST,MASTER,UP,LOWER_UP> mtu {self.state.mtu} qdisc noqueue "
            "state UP mode DEFAULT group default qlen 1000\n"
            f"    link/ether {mac} brd ff:ff:ff:ff:ff:ff promiscuity 0 allmulti 0 minmtu 68 "
            "maxmtu 65535 \n"
            "    bond mode 802.3ad miimon 100 updelay 0 downdelay 0 peer_notify_delay 0 "
            "use_carrier 1 arp_interval 0 arp_missed_max 2 arp_validate none arp_all_targets any "
            "primary_reselect always fail_over_mac none xmit_hash_policy layer3+4 resend_igmp 1 "
            "num_grat_arp 1 all_slaves_active 0 min_links 0 lp_interval 1 packets_per_slave 1 "
            "lacp_active on lacp_rate fast ad_select stable ad_aggregator 1 ad_num_ports "
            f"{sum(p.active and p.enslaved for p in self.state.ports)} ad_actor_key 15 ad_partner_key "
            "32783 ad_partner_mac 3c:fd:fe:9e:11:00 ad_actor_sys_prio 65535 ad_user_port_key 0 "
            "ad_actor_system 00:00:00:00:00:00 tlb_dynamic_lb 1 addrgenmode eui64 numtxqueues 16 "
            "numrxqueues 16 gso_max_size 65536 gso_max_segs 65535\n"
        )

    def bonding(self) -> str:
        """/proc/net/bonding/bond1 as the bonding driver writes it (bond_procfs.c)."""
        header = (
            f"Ethernet Channel Bonding Driver: v{self.state.kernel}\n\n"
            "Bonding Mode: IEEE 802.3ad Dynamic link aggregation\n"
            "Transmit Hash Policy: layer3+4 (1)\nMII Status: up\nMII Polling Interval (ms): 100\n"
            "Up Delay (ms): 0\nDown Delay (ms): 0\nPeer Notification Delay (ms): 0\n\n"
            "802.3ad info\nLACP active: on\nLACP rate: fast\nMin links: 0\n"
            "Aggregator selection policy (ad_select): stable\nSystem priority: 65535\n"
            f"System MAC address: {self.state.ports[0].mac}\nActive Aggregator Info:\n"
            "\tAggregator ID: 1\n"
            f"\tNumber of ports: {sum(p.active and p.enslaved for p in self.state.ports)}\n"
            "\tActor Key: 15\n\tPartner Key: 32783\n\tPartner Mac Address: 3c:fd:fe:9e:11:00\n"
        )
        slaves = []
        for i, port in enumerate(p for p in self.state.ports if p.enslaved):
            aggregator = 1 if port.active else 2
            slaves.append(
                f"\nSlave Interface: {port.name}\n"
                f"MII Status: {'up' if port.active else 'down'}\n"
                f"Speed: {'100000 Mbps' if port.active else 'Unknown'}\n"
                f"Duplex: {'full' if port.active else 'Unknown'}\n"
                f"Link Failure Count: {0 if port.up else 3}\n"
                f"Permanent HW addr: {port.mac}\nSlave queue ID: 0\n"
                f"Aggregator ID: {aggregator}\n"
                "Actor Churn State: none\nPartner Churn State: none\n"
                "Actor Churned Count: 0\nPartner Churned Count: 0\n"
                "details actor lacp pdu:\n    system priority: 65535\n"
                f"    system mac address: {self.state.ports[0].mac}\n    port key: 15\n"
                f"    port priority: 255\n    port number: {i + 1}\n    port state: 63\n"
            )
        return header + "".join(slaves)

    def cmd_ip(self, args: list[str]) -> Result:
        if args[:3] == ["-j", "route", "get"] and len(args) == 4:
            # iproute2 ip/iproute.c print_route (JSON): the route to the SSH client, over
            # the management bond, or over bond1 when SSH runs there (ssh-over-bond1).
            over_bond1 = self.state.ssh_over_bond1
            dev, src = (
                (self.state.rdma_ip_interface, self.state.rdma_ip)
                if over_bond1
                else ("bond0", self.state.mgmt_ip)
            )
            gateway = src.rsplit(".", 1)[0] + ".1"
            route = {"dst": args[3], "gateway": gateway, "dev": dev, "prefsrc": src,
                     "flags": [], "uid": 0, "cache": []}  # fmt: skip
            return Result(json.dumps([route]) + "\n")
        if "addr" in args or "address" in args or "a" in args:
            entries = [
                {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP"], "operstate": "UNKNOWN",
                 "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
                {"ifindex": 2, "ifname": "ens1f0", "master": "bond0", "operstate": "UP", "addr_info": []},
                {"ifindex": 3, "ifname": "bond0", "operstate": "UP",
                 "addr_info": [{"family": "inet", "local": self.state.mgmt_ip, "prefixlen": 24}]},
            ]  # fmt: skip
            for i, port in enumerate(self.state.ports):
                entries.append(
                    {
                        "ifindex": 4 + i,
                        "ifname": port.name,
                        **({"master": self.state.bond_name} if port.enslaved else {}),
                        "operstate": "UP" if port.active else "DOWN",
                        "address": port.mac,
                        "addr_info": [],
                    }
                )
            address = [{"family": "inet", "local": self.state.rdma_ip, "prefixlen": 24}]
            vlan = self.state.rdma_ip_interface != self.state.bond_name
            entries.append(
                {
                    "ifindex": 6,
                    "ifname": self.state.bond_name,
                    "operstate": "UP",
                    "addr_info": [] if vlan else address,
                }
            )
            if vlan:
                # A VLAN on the bond (ssh-over-bond1-vlan): iproute2 names its parent in
                # "link" (ip/ipaddress.c print_linkinfo, IFLA_LINK), not in "master".
                entries.append({"ifindex": 7, "ifname": self.state.rdma_ip_interface,
                                "link": self.state.bond_name, "operstate": "UP",
                                "addr_info": address})  # fmt: skip
            return Result(json.dumps(entries) + "\n")
        if (
            args[:3] == ["-d", "link", "show"]
            and len(args) == 4
            and args[3] == self.state.bond_name
        ):
            return Result(self._bond_details())
        if "link" in args and "set" in args:
            rest = [a for a in args if a not in ("link", "set", "dev")]
            port = self.state.port(rest[0]) if rest else None
            if port is None:
                return Result(
                    stderr=f'Cannot find device "{rest[0] if rest else ""}"\n', exit_status=1
                )
            words = rest[1:]
            if "nomaster" in words:
                self.network.link_master(port, False)
            elif "master" in words:
                self.network.link_master(port, True)
            if "down" in words:
                port.admin_up = False
            if "up" in words:
                port.admin_up = True
            return Result()
        return Result(
            stderr='Object "' + " ".join(args) + '" is unknown, try "ip help".\n', exit_status=1
        )

    def cmd_dcb(self, args: list[str]) -> Result:
        words = [a for a in args if a not in ("-j", "-N", "-p", "-s")]
        if (
            len(words) < 4
            or words[1] not in ("show", "set", "add", "del", "replace")
            or words[2] != "dev"
        ):
            return Result(
                stderr="Usage: dcb [ OPTIONS ] OBJECT { COMMAND | help }\n", exit_status=1
            )
        port = self.state.port(words[3])
        if port is None:
            return Result(stderr=f'Cannot find device "{words[3]}"\n', exit_status=1)
        if (
            words[:2] == ["pfc", "set"]
            and "pfc-not-applied" in self.state.faults
            and port is self.state.ports[-1]
        ):
            return Result()  # a firmware that acknowledges and ignores (readback differs)
        answer = DcbTool(self.state.kernel_log).run(
            args, port.dcb, port=port.name, lldp_agent=port.lldp_agent, bonded=port.enslaved
        )
        return Result(answer.stdout, answer.stderr, answer.exit_status)
