"""lspci, ACS, IOMMU, rdma link/dev (text and JSON), ibv_devices, ibv_devinfo, show_gids."""

from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_text
from wizard.facts import ParseError, parse
from wizard.facts.pci import E810_DEVICE_IDS, is_e810, split_function


def test_lspci_e810_two_functions_of_one_device():
    fact = parse("lspci", fixture_text("lspci", "03.txt"))
    assert [d.slot for d in fact.devices] == ["18:00.0", "18:00.1"]
    port = fact.devices[0]
    assert (port.class_name, port.class_id) == ("Ethernet controller", "0200")
    assert (port.vendor_id, port.device_id, port.rev) == ("8086", "1592", "02")
    assert port.description == "Intel Corporation Ethernet Controller E810-C for QSFP"
    assert len(fact.e810_ports()) == 2
    # Two ports of one NIC: same domain:bus:device, different function.
    bases = {d.function_key[0] for d in fact.devices}
    assert bases == {"0000:18:00"}


def test_lspci_nvidia_gpus_with_bracketed_names():
    fact = parse("lspci", fixture_text("lspci", "05.txt"))
    gpus = fact.nvidia_gpus()
    assert len(gpus) == 4
    assert gpus[0].description == "NVIDIA Corporation GH100 [H100 SXM5 80GB]"
    assert (gpus[0].vendor_id, gpus[0].device_id, gpus[0].class_id) == ("10de", "2330", "0302")
    assert gpus[0].rev == "a1"
    assert fact.e810_ports() == []


def test_e810_identification():
    assert {"1591", "1592", "1593", "159b"} <= E810_DEVICE_IDS
    assert is_e810("8086", "159B")
    assert not is_e810("8086", "1572")  # X710
    assert not is_e810("15b3", "1017")
    assert split_function("0000:3b:00.1") == ("0000:3b:00", "1")


def test_acs_full_vvv_block_disabled():
    fact = parse("lspci-acs", fixture_text("lspci-acs", "01.txt"))
    assert len(fact.acs) == 1
    assert fact.acs[0].slot == "21:00.0"
    assert fact.acs[0].src_valid is False
    assert set(fact.acs[0].ctl) >= {"SrcValid", "TransBlk", "ReqRedir", "DirectTrans"}
    assert not fact.any_enabled


def test_acs_grep_only_lines_have_no_slot():
    fact = parse("lspci-acs", fixture_text("lspci-acs", "02.txt"))
    assert len(fact.acs) == 26
    assert all(entry.slot is None for entry in fact.acs)
    assert not fact.any_enabled


def test_acs_enabled_bridge_is_reported_with_its_slot():
    text = (
        "00:01.1 PCI bridge: Intel Corporation Device 1bbe\n"
        "\tCapabilities: [220 v1] Access Control Services\n"
        "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
    )
    fact = parse("lspci-acs", text)
    assert fact.any_enabled and fact.acs[0].slot == "00:01.1"
    assert fact.acs[0].ctl["ReqRedir"] is True


def test_iommu_passthrough_without_cmdline_suffix():
    fact = parse("iommu", fixture_text("iommu", "01.txt"))
    assert fact.default_domain == "passthrough"
    assert fact.set_via_cmdline is False
    assert not fact.translated


def test_iommu_dmar_enabled_without_domain_line():
    fact = parse("iommu", fixture_text("iommu", "06.txt"))
    assert fact.dmar_enabled is True
    assert fact.default_domain is None


def test_iommu_translated_set_on_cmdline():
    text = "[    0.5] iommu: Default domain type: Translated (set via kernel command line)\n"
    fact = parse("iommu", text)
    assert fact.translated and fact.set_via_cmdline


def test_rdma_link_e810_ports():
    fact = parse("rdma-link", fixture_text("rdma-link", "01.txt"))
    assert [(ln.device, ln.port, ln.state, ln.netdev) for ln in fact.links] == [
        ("irdma0", 1, "ACTIVE", "ens6f0"),
        ("irdma1", 1, "ACTIVE", "ens6f1"),
    ]
    assert fact.by_netdev("ens6f1").device == "irdma1"


def test_rdma_link_mixed_ib_and_ethernet():
    fact = parse("rdma-link", fixture_text("rdma-link", "05.txt"))
    assert len(fact.links) == 9
    ethernet = [ln for ln in fact.links if ln.netdev]
    assert [(ln.device, ln.netdev) for ln in ethernet] == [("mlx5_4", "enp97s0f0")]
    assert fact.links[1].state == "DOWN" and fact.links[1].physical_state == "DISABLED"


def test_rdma_link_soft_roce():
    fact = parse("rdma-link", fixture_text("rdma-link", "03.txt"))
    assert fact.links[0].device == "rxe_0" and fact.links[0].netdev == "p1p1"


def test_rdma_link_json_form():
    # `rdma -j link show` (iproute2 rdma/link.c): ifindex, ifname, port, state, physical_state,
    # netdev, netdev_index.
    data = [
        {"ifindex": 0, "ifname": "irdma0", "port": 1, "state": "ACTIVE",
         "physical_state": "LINK_UP", "netdev": "ens5f0np0", "netdev_index": 4},
        {"ifindex": 1, "ifname": "irdma1", "port": 1, "state": "DOWN",
         "physical_state": "DISABLED", "netdev": "ens5f1np1", "netdev_index": 5},
    ]  # fmt: skip
    fact = parse("rdma-link", json.dumps(data))
    assert [(ln.device, ln.state, ln.netdev) for ln in fact.links] == [
        ("irdma0", "ACTIVE", "ens5f0np0"),
        ("irdma1", "DOWN", "ens5f1np1"),
    ]


def test_rdma_dev_text_and_json():
    text = (
        "0: irdma0: node_type ca fw 1.72 node_guid b683:51ff:fe02:7a30 "
        "sys_image_guid b683:51ff:fe02:7a30\n"
        "1: irdma1: node_type ca fw 1.72 node_guid b683:51ff:fe02:7a31 "
        "sys_image_guid b683:51ff:fe02:7a31\n"
    )
    fact = parse("rdma-dev", text)
    assert [(d.index, d.name, d.node_type, d.fw) for d in fact.devices] == [
        (0, "irdma0", "ca", "1.72"),
        (1, "irdma1", "ca", "1.72"),
    ]
    data = [{"ifindex": 0, "ifname": "irdma0", "node_type": "ca", "fw": "1.72",
             "node_guid": "b683:51ff:fe02:7a30", "sys_image_guid": "b683:51ff:fe02:7a30"}]  # fmt: skip
    fact = parse("rdma-dev", json.dumps(data))
    assert fact.devices[0].node_guid == "b683:51ff:fe02:7a30"


def test_rdma_json_that_is_broken_is_a_parse_error():
    with pytest.raises(ParseError, match="JSON"):
        parse("rdma-link", '[{"ifname": "irdma0",')


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("01.txt", [("mlx5_0", "043f720300c10530"), ("mlx5_1", "043f720300c10531")]),
        ("02.txt", []),
        ("04.txt", [("irdma0", "6a05cafffec1b900"), ("irdma1", "6a05cafffec1b901")]),
    ],
)
def test_ibv_devices(name, expected):
    fact = parse("ibv-devices", fixture_text("ibv-devices", name))
    assert [(d.name, d.node_guid) for d in fact.devices] == expected


def test_ibv_devinfo_e810_irdma():
    fact = parse("ibv-devinfo", fixture_text("ibv-devinfo", "01.txt"))
    assert [d.hca_id for d in fact.devices] == ["irdma0", "irdma1"]
    dev = fact.devices[0]
    assert (dev.transport, dev.fw_ver, dev.vendor_id, dev.vendor_part_id) == (
        "InfiniBand", "1.72", "0x8086", 5531)  # fmt: skip
    assert dev.vendor_part_id == 0x159B
    assert dev.phys_port_cnt == 1
    port = dev.ports[0]
    assert (port.port, port.state, port.max_mtu, port.active_mtu, port.link_layer) == (
        1, "PORT_ACTIVE", 4096, 1024, "Ethernet")  # fmt: skip
    assert fact.errors == []


def test_ibv_devinfo_rxe_without_link_layer():
    fact = parse("ibv-devinfo", fixture_text("ibv-devinfo", "03.txt"))
    assert fact.devices[0].hca_id == "rxe0"
    assert fact.devices[0].ports[0].link_layer is None
    assert fact.devices[0].vendor_part_id == 0


def test_ibv_devinfo_tab_separated_efa():
    fact = parse("ibv-devinfo", fixture_text("ibv-devinfo", "04.txt"))
    dev = fact.devices[0]
    assert dev.hca_id == "efa_0" and dev.transport == "unspecified"
    assert dev.ports[0].link_layer == "InfiniBand"
    assert dev.hw_ver == "0xEFA0"


def test_ibv_devinfo_connectx_two_hcas():
    fact = parse("ibv-devinfo", fixture_text("ibv-devinfo", "07.txt"))
    assert [d.hca_id for d in fact.devices] == ["mlx5_0", "mlx5_1"]
    assert fact.devices[0].fw_ver == "16.28.1002"
    assert fact.devices[0].vendor_part_id == 4119
    assert fact.devices[0].board_id == "MT_0000000080"
    assert all(d.ports[0].link_layer == "Ethernet" for d in fact.devices)


def test_ibv_devinfo_verbose_gids_and_errors():
    text = (
        "hca_id:\tirdma0\n\ttransport:\t\t\tInfiniBand (0)\n\tphys_port_cnt:\t\t\t1\n"
        "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tEthernet\n"
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:6a05:caff:fec1:b900, RoCE v2\n"
        "\t\t\tGID[  1]:\t\t::ffff:192.168.50.21, RoCE v2\n"
        "Failed to open device irdma1\n"
    )
    fact = parse("ibv-devinfo", text)
    gids = fact.devices[0].ports[0].gids
    assert [(g.index, g.gid, g.type) for g in gids] == [
        (0, "fe80:0000:0000:0000:6a05:caff:fec1:b900", "RoCE v2"),
        (1, "::ffff:192.168.50.21", "RoCE v2"),
    ]
    assert fact.errors == ["Failed to open device irdma1"]


def test_ibv_devinfo_only_an_error():
    fact = parse("ibv-devinfo", "No IB devices found\n")
    assert fact.devices == [] and fact.errors == ["No IB devices found"]


def test_show_gids_v1_v2_pairs_with_ipv4():
    fact = parse("show-gids", fixture_text("show-gids", "01.txt"))
    assert len(fact.gids) == 6
    assert fact.gids[0].ipv4 is None and fact.gids[0].ver == "v1"
    v2 = fact.roce_v2_ipv4()
    assert [(g.index, g.ipv4, g.netdev) for g in v2] == [(5, "172.19.0.60", "ens1f0")]


def test_show_gids_tab_separated_pod_interfaces():
    fact = parse("show-gids", fixture_text("show-gids", "03.txt"))
    assert [g.index for g in fact.gids] == [4, 5, 6, 7, 4, 5, 6, 7]
    assert {g.netdev for g in fact.gids} == {"net1", "net2"}
    assert fact.gids[2].ipv4 == "10.152.0.12"


def test_show_gids_bond_device():
    fact = parse("show-gids", fixture_text("show-gids", "04.txt"))
    assert fact.gids[0].dev == "mlx5_bond_0"
    bond_v2 = [g.index for g in fact.roce_v2_ipv4() if g.netdev == "bond1"]
    assert bond_v2 == [5]
