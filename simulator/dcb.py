"""The DCB of one E810 port, as Intel's ice driver, the kernel's dcbnl and iproute2's
``dcb`` tool together answer it. Each rule names its source; the lab's hosts delegate
``dcb ...`` here, so that a command the real driver would refuse or silently ignore fails
a test instead of passing in a lab that agrees with the wizard.

Sources (read for this model; quoted where the code depends on a message):
- ice: drivers/net/ethernet/intel/ice/ice_dcb_nl.c, ice_dcb_lib.c (Linux), and Intel's
  out-of-tree ice 1.13.x (src/ice_dcb_nl.c, src/ice_lag.c);
- dcbnl: net/dcb/dcbnl.c (``dcb_ieee_setapp`` -EEXIST, ``dcb_ieee_delapp`` -ENOENT);
- iproute2: dcb/dcb.c, dcb/dcb_ets.c, dcb/dcb_app.c, man/man8/dcb-ets.8, dcb-app.8.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# iproute2 prints a failed netlink write with perror("Attribute write") (dcb/dcb.c).
EINVAL = "Attribute write: Invalid argument\n"
EEXIST = "Attribute write: File exists\n"
ENOENT = "Attribute write: No such file or directory\n"

# Intel's out-of-tree ice (2.6.6, src/ice_dcb_nl.c ice_dcbnl_setets / ice_dcbnl_setpfc)
# checks ice_dcb_need_recfg() first and, when the new config equals the live one, returns
# ICE_DCB_NO_HW_CHG (1) past the translation to 0 that mainline does; dcbnl hands the 1
# back in DCB_ATTR_IEEE (dcbnl_ieee_set: nla_put_u8(skb, DCB_ATTR_IEEE, err)). iproute2
# since commit 1b5c7414 (v5.17, "dcb: Fix error reporting when accessing dcb app") reads
# that byte as int8_t in dcb/dcb.c dcb_set_attribute_attr_cb, sets errno = -err (-1) and
# __dcb_set_attribute prints perror("Attribute write") -> glibc's "Unknown error -1", exit
# 1: a `set` that changes nothing is an error on these hosts.
NO_HW_CHG = "Attribute write: Unknown error -1\n"

# lib/rt_names.c + /etc/iproute2/rt_dsfield: the names `dcb app show` prints without -N.
_DSCP_NAMES = (
    {8 * n: f"CS{n}" for n in range(8)}
    | {8 * x + 2 * y: f"AF{x}{y}" for x in range(1, 5) for y in range(1, 4)}
    | {46: "EF"}
)


def _named(name: str, values: list) -> str:
    """iproute2's dcb/dcb.c dcb_print_named_array ("%s ") with dcb_print_array_u8 /
    _on_off / _kw ("%zd:" then "%d " or "%s "): a space after the name and after every
    value, then print_nl(). Same in v6.1.0 and at HEAD."""
    return f"{name} " + "".join(f"{i}:{v} " for i, v in enumerate(values)) + "\n"


def default_bw() -> list[int]:
    return [100] + [0] * 7


def sw_default_tsa() -> list[str]:
    """ice_dcb_sw_dflt_cfg's tsatable: ETS on TC0, 0 (strict) on the others."""
    return ["ets"] + ["strict"] * 7


@dataclass
class PortDcb:
    """What the driver holds for one port (software DCB, firmware LLDP agent off)."""

    pfc: set[int] = field(default_factory=set)
    app: list[tuple[int, int]] = field(default_factory=list)  # (dscp, priority)
    prio_tc: list[int] = field(default_factory=lambda: [0] * 8)
    tc_bw: list[int] = field(default_factory=default_bw)
    tc_tsa: list[str] = field(default_factory=lambda: ["ets"] * 8)
    # etsrec, the recommended ETS (ice_dcbnl_getets hands it out as reco-tc-bw /
    # reco-tc-tsa; `dcb ets set` sends back what it read, so it changes only when named).
    reco_bw: list[int] = field(default_factory=default_bw)
    reco_tsa: list[str] = field(default_factory=lambda: ["ets"] * 8)
    dscp_mode: bool = False  # ICE_QOS_MODE_DSCP after the first DSCP app entry
    # etscfg.willing (pfc.willing goes with it; `dcb pfc show` does not print it): on in the
    # software default, off once the first DSCP entry is added (ice_dcbnl_setapp); `dcb ets
    # set` sends back what it read (ice_dcbnl_setets copies ets->willing).
    willing: bool = False

    def reset(self) -> None:
        """``ice_dcb_sw_dflt_cfg`` (ice 2.6.6 src/ice_dcb_lib.c): the config zeroed, then
        tcbwtable[0] = 100 and tsatable[0] = ETS only, so TCs 1-7 are 0, which dcbnl's
        IEEE_8021QAZ_TSA_STRICT is and iproute2 prints as `strict`; etsrec a copy of it;
        etscfg.willing on (called with ets_willing true from ice_init_pf_dcb when the agent
        stops and from ice_dcbnl_delapp on the last entry) and pfc.willing = 1. One TC,
        every priority on TC0, no PFC, no apps."""
        self.pfc.clear()
        self.app.clear()
        self.prio_tc = [0] * 8
        self.tc_bw = default_bw()
        self.tc_tsa = sw_default_tsa()
        self.reco_bw, self.reco_tsa = default_bw(), sw_default_tsa()
        self.dscp_mode = False
        self.willing = True

    def config(self) -> tuple:
        """The whole DCB config, to compare two ports (OOT ice compares them at bond time:
        "Found netdev %s with different DCB config" and RDMA stays off)."""
        return (tuple(sorted(self.pfc)), tuple(sorted(self.app)), tuple(self.prio_tc),
                tuple(self.tc_bw), tuple(self.tc_tsa), self.dscp_mode)  # fmt: skip


@dataclass
class Answer:
    stdout: str = ""
    stderr: str = ""
    exit_status: int = 0


def _pairs(tokens: list[str]) -> list[tuple[str, str]]:
    return [tuple(t.split(":", 1)) for t in tokens if ":" in t]  # type: ignore[misc]


def _map(tokens: list[str], key: str) -> dict[str, str] | None:
    """The ``i:v`` tokens that follow ``key`` (``all:v`` allowed), or None when absent."""
    if key not in tokens:
        return None
    found: dict[str, str] = {}
    for token in tokens[tokens.index(key) + 1 :]:
        if ":" not in token:
            break
        index, _, value = token.partition(":")
        found[index] = value
    return found


def _expand(mapping: dict[str, str], current: list) -> list:
    result = list(current)
    if "all" in mapping:
        result = [mapping["all"]] * 8
    for index, value in mapping.items():
        if index != "all":
            result[int(index)] = value
    return result


def contiguous(prio_tc: list[int]) -> bool:
    """ice_dcb_tc_contig: the TCs in use must be 0..n-1, no gaps."""
    used = set(prio_tc)
    return used == set(range(max(used) + 1))


class DcbTool:
    """`dcb OBJECT COMMAND dev PORT ...` against a port's ``PortDcb``.

    ``log`` receives the kernel messages the driver would print (dmesg).
    """

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def run(
        self, args: list[str], dcb: PortDcb, *, port: str, lldp_agent: bool, bonded: bool
    ) -> Answer:
        json_out, numeric = "-j" in args, "-N" in args
        args = [a for a in args if a not in ("-j", "-N", "-p", "-s")]
        obj, verb, rest = args[0], args[1], args[4:]
        if verb == "show":
            return self._show(obj, dcb, rest, json_out, numeric)
        # ice_dcb_nl.c: with the firmware LLDP agent on (DCB_CAP_DCBX_LLD_MANAGED) setets /
        # setpfc return -EINVAL silently; setapp logs "can't do DSCP QoS when FW DCB agent
        # active". Intel's OOT ice refuses any change while the port is in a bond (no
        # message; mainline >= 6.6 logs "DCB changes not allowed when in a bond").
        if lldp_agent:
            if obj == "app":
                self.log.append(f"ice {port}: can't do DSCP QoS when FW DCB agent active")
            return Answer(stderr=EINVAL, exit_status=1)
        if bonded:
            return Answer(stderr=EINVAL, exit_status=1)
        if obj == "pfc" and verb == "set":
            before = set(dcb.pfc)
            for index, value in (_map(rest, "prio-pfc") or {}).items():
                prios = range(8) if index == "all" else [int(index)]
                for prio in prios:
                    (dcb.pfc.add if value == "on" else dcb.pfc.discard)(prio)
            if dcb.pfc == before:
                return Answer(stderr=NO_HW_CHG, exit_status=1)  # ICE_DCB_NO_HW_CHG
            return Answer()
        if obj == "ets" and verb == "set":
            return self._set_ets(dcb, rest, port)
        if obj == "app" and verb in ("add", "del", "replace"):
            return self._app(dcb, verb, rest, port)
        return Answer(stderr=f'Command "{verb}" is unknown, try "dcb {obj} help".\n', exit_status=1)

    # -- ETS -------------------------------------------------------------------------------

    def _set_ets(self, dcb: PortDcb, rest: list[str], port: str) -> Answer:
        bw = _map(rest, "tc-bw")
        tsa = _map(rest, "tc-tsa")
        prio = _map(rest, "prio-tc")
        new_bw = [int(v) for v in _expand(bw, dcb.tc_bw)] if bw is not None else dcb.tc_bw
        new_tsa = _expand(tsa, dcb.tc_tsa) if tsa is not None else dcb.tc_tsa
        # dcb_ets.c (client side, before anything is sent): with any ETS class the
        # percentages must total 100.
        if "ets" in new_tsa and sum(new_bw) != 100:
            return Answer(
                stderr=f"Bandwidth percentages in tc-bw sum to {sum(new_bw)}%, expected 100%\n",
                exit_status=1,
            )
        new_prio = dcb.prio_tc
        if prio is not None and not dcb.dscp_mode:
            new_prio = [int(v) for v in _expand(prio, dcb.prio_tc)]
        # ice_dcb_lib.c ice_dcb_bwchk (from ice_dcbnl_setets, on the new map, before the
        # config is compared or applied): with one TC in use "no bandwidth checks required
        # ... so assign all bandwidth to TC0" (tcbwtable[0] = 100, the rest kept as sent);
        # with more, the shares of the TCs in use must total 100 (0 gives TC0 100 %).
        num_tc = len(set(new_prio)) if contiguous(new_prio) else 1  # ice_dcb_get_num_tc
        new_bw = list(new_bw)
        if num_tc == 1 or sum(new_bw[:num_tc]) == 0:
            new_bw[0] = 100
        elif sum(new_bw[:num_tc]) != 100:
            self.log.append(f"ice {port}: Invalid config, total bandwidth must equal 100")
            return Answer(stderr=EINVAL, exit_status=1)
        if (new_bw, list(new_tsa), new_prio) == (dcb.tc_bw, dcb.tc_tsa, dcb.prio_tc):
            return Answer(stderr=NO_HW_CHG, exit_status=1)  # ICE_DCB_NO_HW_CHG
        dcb.tc_bw, dcb.tc_tsa = new_bw, list(new_tsa)
        if prio is not None and not dcb.dscp_mode:
            # ice_dcbnl_setets copies prio_tc only in VLAN mode ("in DSCP mode up->tc
            # mapping cannot change"): in DSCP mode it is accepted and ignored.
            dcb.prio_tc = [int(v) for v in _expand(prio, dcb.prio_tc)]
            if not contiguous(dcb.prio_tc):
                # ice_dcb_lib.c ice_dcb_get_num_tc / ice_dcb_noncontig_cfg: one TC again.
                self.log.append("Non-contiguous TCs - Disabling DCB")
                dcb.reset()
        return Answer()

    # -- APP -------------------------------------------------------------------------------

    def _app(self, dcb: PortDcb, verb: str, rest: list[str], port: str) -> Answer:
        if not rest or rest[0] != "dscp-prio":
            # ice_dcbnl_setapp: "ONLY DSCP APP TLVs have operational significance"
            return Answer(stderr=EINVAL, exit_status=1)
        entries = [(int(d), int(p)) for d, p in _pairs(rest[1:])]
        if verb == "add":
            for entry in entries:
                answer = self._add(dcb, entry, port)
                if answer.exit_status:
                    return answer
            return Answer()
        if verb == "del":
            for entry in entries:
                if entry not in dcb.app:
                    return Answer(stderr=ENOENT, exit_status=1)  # dcb_ieee_delapp
                self._delete(dcb, entry, port)
            return Answer()
        # replace (dcb_app.c dcb_cmd_app_replace): add what is new, then delete the other
        # entries of the same DSCP; it prints an error but returns 0 whatever happened.
        errors = ""
        for entry in entries:
            if entry not in dcb.app and self._add(dcb, entry, port).exit_status:
                errors = "Could not add new APP entries\n"
        for dscp, prio in list(dcb.app):
            if any(d == dscp and p != prio for d, p in entries):
                self._delete(dcb, (dscp, prio), port)
        return Answer(stderr=errors)

    def _add(self, dcb: PortDcb, entry: tuple[int, int], port: str) -> Answer:
        dscp = entry[0]
        if entry in dcb.app:
            return Answer(stderr=EEXIST, exit_status=1)  # dcb_ieee_setapp: -EEXIST
        if any(d == dscp for d, _ in dcb.app):
            self.log.append(f"ice {port}: DSCP value 0x{dscp:04X} already user mapped")
            return Answer(stderr=EINVAL, exit_status=1)
        if not dcb.dscp_mode:
            # The first DSCP entry switches the port to L3 mode: ETS back to TC0 = 100 %,
            # priority n -> TC n (ice_dcbnl_setapp).
            self.log.append(f"ice {port}: Switched QoS to L3 DSCP mode")
            dcb.dscp_mode = True
            dcb.willing = False  # new_cfg->etscfg.willing = 0; pfc.willing = 0
            dcb.tc_bw, dcb.tc_tsa = default_bw(), ["ets"] * 8
            dcb.prio_tc = list(range(8))
        dcb.app.append(entry)
        return Answer()

    def _delete(self, dcb: PortDcb, entry: tuple[int, int], port: str) -> None:
        dcb.app.remove(entry)
        if not dcb.app:
            self.log.append(f"ice {port}: Switched QoS to L2 VLAN mode")
            dcb.reset()

    # -- show ------------------------------------------------------------------------------

    def _show(
        self, obj: str, dcb: PortDcb, rest: list[str], json_out: bool, numeric: bool
    ) -> Answer:
        if obj == "pfc":
            if json_out:
                return Answer(json.dumps({"pfc_cap": 4, "macsec_bypass": False, "delay": 0,
                                          "prio_pfc": [p in dcb.pfc for p in range(8)]}) + "\n")  # fmt: skip
            # dcb_pfc.c dcb_pfc_print: "pfc-cap %d ", "macsec-bypass %s ", "delay %d ".
            pfc = ["on" if p in dcb.pfc else "off" for p in range(8)]
            return Answer("pfc-cap 4 macsec-bypass off delay 0 \n" + _named("prio-pfc", pfc))
        if obj == "ets":
            # ice_dcbnl_getets: tc_rx_bw (pg-bw) is the same tcbwtable as tc_tx_bw and
            # reco_prio_tc the same prio_table as prio_tc; reco bw / tsa come from etsrec.
            fields = {"tc_bw": dcb.tc_bw, "pg_bw": dcb.tc_bw, "tc_tsa": dcb.tc_tsa,
                      "prio_tc": dcb.prio_tc, "reco_tc_bw": dcb.reco_bw,
                      "reco_tc_tsa": dcb.reco_tsa, "reco_prio_tc": dcb.prio_tc}  # fmt: skip
            if json_out:
                head = {"willing": dcb.willing, "ets_cap": 8, "cbs": False}
                return Answer(json.dumps(head | fields) + "\n")
            # dcb_ets.c dcb_ets_print: "willing %s ", "ets-cap %d ", "cbs %s ", print_nl(),
            # then each array on its own line in this order.
            return Answer(
                f"willing {'on' if dcb.willing else 'off'} ets-cap 8 cbs off \n"
                + "".join(_named(name.replace("_", "-"), values) for name, values in fields.items())
            )
        if obj == "app":
            if json_out:
                # iproute2 >= 6.5 prints a trailing " " in each entry (a245bfe1).
                return Answer(json.dumps({"dscp_prio": [[d, p, " "] for d, p in dcb.app]}) + "\n")
            if not dcb.app:
                return Answer()  # no line at all when there are no entries
            # dcb_app.c dcb_app_print_filtered: "%s " (the selector), then "%s:" "%d " per
            # entry: a space after each.
            names = [f"{d if numeric else _DSCP_NAMES.get(d, d)}:{p} " for d, p in dcb.app]
            return Answer("dscp-prio " + "".join(names) + "\n")
        return Answer(stderr=f'Object "{obj}" is unknown\n', exit_status=1)
