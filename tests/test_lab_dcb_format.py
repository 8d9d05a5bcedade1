"""The lab's `dcb ... show` text against the format iproute2's print code produces.

The reference below is written from iproute2's own print functions (v6.1.0, unchanged at
HEAD ee2a4a86): dcb/dcb.c dcb_print_named_array prints "%s " (the name), then
dcb_print_array_u8 / dcb_print_array_on_off / dcb_print_array_kw print "%zd:" and "%s "
per value, so every value is followed by a space; dcb/dcb_ets.c dcb_ets_print prints the
willing / ets-cap / cbs line ("willing %s ", "ets-cap %d ", "cbs %s ") and then tc-bw,
pg-bw, tc-tsa, prio-tc, reco-tc-bw, reco-tc-tsa, reco-prio-tc, each ended by print_nl();
dcb/dcb_pfc.c dcb_pfc_print prints "pfc-cap %d ", "macsec-bypass %s ", "delay %d ", then
prio-pfc; dcb/dcb_app.c dcb_app_print_filtered prints "%s " (dscp-prio) and "%s:" "%d "
per entry. A script that compares these lines exactly must expect the trailing space.
"""

from __future__ import annotations

from simulator.dcb import DcbTool, PortDcb
from wizard.facts import parse

TSA = {"strict", "cbs", "ets", "vendor"}  # dcb_ets.c tsa_names


def named(name: str, values: list) -> str:
    """dcb_print_named_array + dcb_print_array_*: "NAME " then "i:v " per value."""
    return f"{name} " + "".join(f"{i}:{v} " for i, v in enumerate(values)) + "\n"


def on_off(flag: bool) -> str:
    return "on" if flag else "off"


def iproute2_ets(willing: bool, ets_cap: int, cbs: bool, tc_bw, pg_bw, tc_tsa, prio_tc,
                 reco_bw, reco_tsa, reco_prio) -> str:  # fmt: skip
    return (f"willing {on_off(willing)} ets-cap {ets_cap} cbs {on_off(cbs)} \n"
            + named("tc-bw", tc_bw) + named("pg-bw", pg_bw) + named("tc-tsa", tc_tsa)
            + named("prio-tc", prio_tc) + named("reco-tc-bw", reco_bw)
            + named("reco-tc-tsa", reco_tsa) + named("reco-prio-tc", reco_prio))  # fmt: skip


def iproute2_pfc(cap: int, mbc: bool, delay: int, enabled: set[int]) -> str:
    return (f"pfc-cap {cap} macsec-bypass {on_off(mbc)} delay {delay} \n"
            + named("prio-pfc", [on_off(p in enabled) for p in range(8)]))  # fmt: skip


def show(dcb: PortDcb, *args: str) -> str:
    answer = DcbTool([]).run(list(args), dcb, port="p0", lldp_agent=False, bonded=False)
    assert answer.exit_status == 0, answer.stderr
    return answer.stdout


def configured() -> PortDcb:
    dcb = PortDcb()
    tool = DcbTool([])
    for argv in (["app", "add", "dev", "p0", "dscp-prio", "24:3"],
                 ["pfc", "set", "dev", "p0", "prio-pfc", "3:on"],
                 ["ets", "set", "dev", "p0", "tc-tsa", "all:ets", "tc-bw", "0:50", "3:50"]):  # fmt: skip
        assert tool.run(argv, dcb, port="p0", lldp_agent=False, bonded=False).exit_status == 0
    return dcb


def test_ets_show_is_iproute2s_format_byte_for_byte():
    dcb = configured()
    # ice_dcbnl_getets: pg-bw (tc_rx_bw) is the same tcbwtable as tc-bw, reco-prio-tc
    # the same prio_table as prio-tc; reco-tc-bw / reco-tc-tsa come from etsrec.
    bw = [50, 0, 0, 50, 0, 0, 0, 0]
    expected = iproute2_ets(False, 8, False, bw, bw, ["ets"] * 8, list(range(8)),
                            dcb.reco_bw, dcb.reco_tsa, list(range(8)))  # fmt: skip
    assert show(dcb, "ets", "show", "dev", "p0") == expected
    assert all(t in TSA for t in dcb.reco_tsa)


def test_pfc_show_is_iproute2s_format_byte_for_byte():
    assert show(configured(), "pfc", "show", "dev", "p0") == iproute2_pfc(4, False, 0, {3})
    assert show(PortDcb(), "pfc", "show", "dev", "p0") == iproute2_pfc(4, False, 0, set())


def test_app_show_prints_a_space_after_each_entry():
    dcb = configured()
    assert show(dcb, "app", "show", "dev", "p0") == "dscp-prio CS3:3 \n"
    assert show(dcb, "-N", "app", "show", "dev", "p0") == "dscp-prio 24:3 \n"


def test_the_live_parsers_read_the_real_format():
    dcb = configured()
    ets = parse("dcb-ets", show(dcb, "ets", "show", "dev", "p0"))
    assert [ets.tc_bw[str(i)] for i in range(8)] == [50, 0, 0, 50, 0, 0, 0, 0]
    assert set(ets.tc_tsa.values()) == {"ets"} and len(ets.tc_tsa) == 8
    pfc = parse("dcb-pfc", show(dcb, "pfc", "show", "dev", "p0"))
    assert pfc.enabled() == [3]
    app = parse("dcb-app", show(dcb, "-N", "app", "show", "dev", "p0"))
    assert app.priorities_for(24) == [3]


def test_the_software_default_is_ice_dcb_sw_dflt_cfg():
    """The LLDP agent off or the last DSCP entry gone: ice_dcb_sw_dflt_cfg (ice 2.6.6
    src/ice_dcb_lib.c) sets only TC0's selection (ETS), so TCs 1-7 show `strict`, and
    ETS willing on; the first DSCP entry turns willing off and every TC to ETS
    (ice_dcbnl_setapp)."""
    dcb = PortDcb()
    dcb.reset()
    default = iproute2_ets(True, 8, False, [100] + [0] * 7, [100] + [0] * 7,
                           ["ets"] + ["strict"] * 7, [0] * 8, [100] + [0] * 7,
                           ["ets"] + ["strict"] * 7, [0] * 8)  # fmt: skip
    assert show(dcb, "ets", "show", "dev", "p0") == default
    tool = DcbTool([])
    add = ["app", "add", "dev", "p0", "dscp-prio", "24:3"]
    assert tool.run(add, dcb, port="p0", lldp_agent=False, bonded=False).exit_status == 0
    text = show(dcb, "ets", "show", "dev", "p0")
    assert text.startswith("willing off ") and named("tc-tsa", ["ets"] * 8) in text
    delete = ["app", "del", "dev", "p0", "dscp-prio", "24:3"]
    assert tool.run(delete, dcb, port="p0", lldp_agent=False, bonded=False).exit_status == 0
    assert show(dcb, "ets", "show", "dev", "p0") == default
