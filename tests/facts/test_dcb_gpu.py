"""dcb pfc/ets/app (text, symbolic, numeric and JSON) and the nvidia-smi family."""

from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_text
from wizard.facts import ParseError, parse
from wizard.facts.dcb import DSCP_NAMES, dscp_value
from wizard.facts.gpu import link_rank


def test_pfc_before_and_after_with_buggy_readback():
    before = parse("dcb-pfc", fixture_text("dcb-pfc", "02.txt"))
    assert before.pfc_cap == 4 and before.delay == 0 and before.macsec_bypass is False
    assert before.enabled() == []
    after = parse("dcb-pfc", fixture_text("dcb-pfc", "03.txt"))
    # hns3 reports all eight on although 0-3 were set: the readback is what we record.
    assert after.enabled() == list(range(8))


def test_pfc_single_line_selected_parameters():
    fact = parse("dcb-pfc", fixture_text("dcb-pfc", "talos-mlx5.txt"))
    assert fact.pfc_cap == 8
    assert fact.enabled() == [3]
    assert fact.macsec_bypass is None  # not printed


def test_pfc_json_form():
    # `dcb -j pfc show dev X` (iproute2 dcb_pfc.c): arrays are JSON arrays indexed by prio.
    data = {"pfc_cap": 8, "macsec_bypass": False, "delay": 4096,
            "prio_pfc": [False, False, False, True, False, False, False, False]}  # fmt: skip
    fact = parse("dcb-pfc", json.dumps(data))
    assert fact.enabled() == [3] and fact.delay == 4096 and fact.prio_pfc["0"] is False


def test_pfc_bad_entry_names_it():
    with pytest.raises(ParseError, match="3:maybe"):
        parse("dcb-pfc", "prio-pfc 0:off 3:maybe\n")


def test_ets_tsa_and_bw_lines():
    fact = parse("dcb-ets", fixture_text("dcb-ets", "mlxsw-tsa-bw.txt"))
    assert fact.tc_tsa == {
        "0": "ets",
        "1": "ets",
        "2": "ets",
        **{str(i): "strict" for i in range(3, 8)},
    }
    assert fact.tc_bw["0"] + fact.tc_bw["1"] + fact.tc_bw["2"] == 100
    assert fact.prio_tc == {} and fact.ets_cap is None


def test_ets_prio_tc_identity():
    fact = parse("dcb-ets", fixture_text("dcb-ets", "talos-mlx5.txt"))
    assert fact.prio_tc == {str(i): i for i in range(8)}


def test_ets_full_text_and_json():
    text = (
        "willing off ets-cap 8 cbs off\ntc-bw 0:50 1:0 2:0 3:50 4:0 5:0 6:0 7:0\n"
        "pg-bw 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0\n"
        "tc-tsa 0:ets 1:strict 2:strict 3:ets 4:strict 5:strict 6:strict 7:strict\n"
        "prio-tc 0:0 1:0 2:0 3:3 4:0 5:0 6:0 7:0\n"
    )
    fact = parse("dcb-ets", text)
    assert fact.ets_cap == 8 and fact.willing is False and fact.cbs is False
    assert fact.prio_tc["3"] == 3 and fact.tc_bw["3"] == 50
    data = {"willing": False, "ets_cap": 8, "cbs": False, "tc_bw": [50, 0, 0, 50, 0, 0, 0, 0],
            "pg_bw": [0] * 8, "tc_tsa": ["ets", "strict", "strict", "ets"] + ["strict"] * 4,
            "prio_tc": [0, 0, 0, 3, 0, 0, 0, 0]}  # fmt: skip
    assert parse("dcb-ets", json.dumps(data)).to_json() == fact.to_json()


@pytest.mark.parametrize("name", ["manpage-numeric.txt", "manpage-symbolic.txt"])
def test_app_numeric_and_symbolic_agree(name):
    fact = parse("dcb-app", fixture_text("dcb-app", name))
    # DSCP 24 appears with two priorities (CS3:2 CS3:3).
    assert fact.dscp_prio == [[0, 0], [24, 2], [24, 3], [48, 6]]
    assert fact.priorities_for(24) == [2, 3]


def test_app_af31_and_cs6():
    fact = parse("dcb-app", fixture_text("dcb-app", "talos-mlx5.txt"))
    assert fact.dscp_prio == [[26, 3], [48, 6]]


def test_app_sparx5_single_entry():
    assert parse("dcb-app", fixture_text("dcb-app", "sparx5-eth0.txt")).dscp_prio == [[63, 2]]


def test_app_json_form_with_iproute2_spacer():
    # dcb_app_print_filtered() writes each entry as [pid, prio, " "] in JSON.
    data = {"dscp_prio": [[24, 3, " "], [0, 0, " "]], "default_prio": [0]}
    fact = parse("dcb-app", json.dumps(data))
    assert fact.dscp_prio == [[24, 3], [0, 0]] and fact.default_prio == [0]


def test_app_other_selectors_are_kept():
    fact = parse("dcb-app", "default-prio 0\nethtype-prio 8906:3\ndscp-prio CS3:3\n")
    assert fact.default_prio == [0]
    assert fact.other == {"ethtype_prio": [["8906", "3"]]}
    assert fact.dscp_prio == [[24, 3]]


def test_dscp_names():
    assert dscp_value("CS3") == 24 and dscp_value("af31") == 26 and dscp_value("EF") == 46
    assert dscp_value("VA") == 44 and dscp_value("AF43") == 38 and dscp_value("0x18") == 24
    assert DSCP_NAMES["CS7"] == 56
    with pytest.raises(ValueError):
        dscp_value("64")


def test_nvidia_smi_list():
    text = (
        "GPU 0: NVIDIA B300 SXM6 AC (UUID: GPU-1b2c3d4e-0000-1111-2222-333344445555)\n"
        "GPU 1: NVIDIA B300 SXM6 AC (UUID: GPU-6b2c3d4e-0000-1111-2222-333344445555)\n"
        "  MIG 1g.23gb     Device  0: (UUID: MIG-abc)\n"
    )
    fact = parse("nvidia-smi-l", text)
    assert [(g.index, g.name) for g in fact.gpus] == [
        (0, "NVIDIA B300 SXM6 AC"),
        (1, "NVIDIA B300 SXM6 AC"),
    ]
    assert fact.gpus[1].uuid.startswith("GPU-6b2c")


@pytest.mark.parametrize(
    ("name", "driver", "cuda", "count", "first"),
    [
        ("01.txt", "575.51.03", "12.9", 4, ("NVIDIA RTX 6000 Ada Gene...", 2, 49140, 0)),
        ("03.txt", "575.51.03", "12.9", 2, ("NVIDIA RTX 6000 Ada Gene...", 4, 49140, 0)),
        ("06.txt", "580.65.06", "13.0", 1, ("Tesla P4", 0, 7680, 0)),
    ],
)
def test_nvidia_smi_table(name, driver, cuda, count, first):
    fact = parse("nvidia-smi", fixture_text("nvidia-smi", name))
    assert (fact.driver_version, fact.cuda_version, len(fact.gpus)) == (driver, cuda, count)
    gpu = fact.gpus[0]
    assert (gpu.name, gpu.memory_used_mib, gpu.memory_total_mib, gpu.util_percent) == first
    assert [g.index for g in fact.gpus] == list(range(count))


def test_topo_four_gpus_four_nics_with_legend():
    fact = parse("nvidia-smi-topo", fixture_text("nvidia-smi-topo", "02.txt"))
    assert fact.devices == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3"]
    assert fact.matrix["GPU0"]["NIC0"] == "NODE"
    assert fact.matrix["GPU2"]["NIC3"] == "NODE"
    assert fact.matrix["NIC0"]["NIC1"] == "PIX"
    assert fact.nic_legend == {
        "NIC0": "mlx5_0",
        "NIC1": "mlx5_1",
        "NIC2": "mlx5_2",
        "NIC3": "mlx5_3",
    }
    assert fact.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31", "GPU2": "32-63", "GPU3": "32-63"}
    assert fact.numa_affinity["GPU2"] == "1"
    assert fact.distance("GPU0", "mlx5_2") == "SYS"
    assert fact.distance("GPU0", "irdma0") is None


def test_topo_two_gpus_phb():
    fact = parse("nvidia-smi-topo", fixture_text("nvidia-smi-topo", "04.txt"))
    assert fact.gpus() == ["GPU0", "GPU1"]
    assert fact.matrix["GPU0"]["GPU1"] == "PHB"
    assert fact.distance("GPU1", "mlx5_1") == "NODE"


def test_link_rank_orders_for_nccl():
    assert (
        link_rank("PIX")
        < link_rank("PXB")
        < link_rank("PHB")
        < link_rank("NODE")
        < link_rank("SYS")
    )
    assert link_rank("NV18") < link_rank("PXB")
