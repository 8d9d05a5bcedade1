"""os-release, containerd, lsmod, modinfo, ethtool -i/-S and bonding, on the real fixtures."""

from __future__ import annotations

import pytest

from tests.conftest import fixture_text
from wizard.facts import ParseError, parse
from wizard.facts.nic import driver_in_tree
from wizard.facts.system import module_in_tree


def test_os_release_ubuntu_unquoted_values():
    fact = parse("os-release", fixture_text("os-release", "01.txt"))
    assert fact.id == "ubuntu"
    assert fact.version_id == "24.04"
    assert fact.name == "Ubuntu"
    assert fact.pretty_name == "Ubuntu 24.04.2 LTS"
    assert fact.id_like == ["debian"]
    assert fact.fields["VERSION_CODENAME"] == "noble"


def test_os_release_rhel_with_two_id_like_and_single_quotes():
    text = (
        'NAME="Red Hat Enterprise Linux"\nVERSION="10.2 (Coughlan)"\nID="rhel"\n'
        'ID_LIKE=\'centos fedora\'\nVERSION_ID="10.2"\nPRETTY_NAME="Red Hat Enterprise Linux 10.2"\n'
    )
    fact = parse("os-release", text)
    assert (fact.id, fact.version_id, fact.id_like) == ("rhel", "10.2", ["centos", "fedora"])


@pytest.mark.parametrize(
    ("name", "version", "major", "revision"),
    [
        ("01.txt", "1.6.21", 1, "3dce8eb055cbb6872793272b4f20ed16117344f8"),
        ("02.txt", "1.7.13", 1, "7c3aca7a610df76212171d200ca3811ff6096eb8"),
        ("03.txt", "1.7.18", 1, "ae71819c4f5e67bb4d5ae76a6b735f29cc25774e"),
        ("04.txt", "2.0.3", 2, "06b99ca80cdbfbc6cc8bd567021738c9af2b36ce"),
        ("05.txt", "2.1.4", 2, "75cb2b7193e4e490e9fbdc236c0e811ccaba3376"),
        ("06.txt", "2.2.1", 2, "dea7da592f5d1d2b7755e3a161be07f43fad8f75"),
    ],
)
def test_containerd_versions(name, version, major, revision):
    fact = parse("containerd-version", fixture_text("containerd-version", name))
    assert fact.version == version
    assert fact.major == major
    assert fact.revision == revision
    # The module path gains /v2 from 2.x on.
    assert fact.module.endswith("/v2") == (major >= 2)


def test_containerd_packaged_and_prerelease_forms():
    fact = parse("containerd-version", "containerd containerd.io 1.7.27 05044ec0a9a7\n")
    assert (fact.version, fact.minor, fact.patch) == ("1.7.27", 7, 27)
    fact = parse(
        "containerd-version", "containerd github.com/containerd/containerd/v2 v2.1.0-rc.1 abc\n"
    )
    assert fact.version == "2.1.0-rc.1" and fact.triple == (2, 1, 0)


def test_lsmod_grep_excerpt_without_header():
    fact = parse("lsmod", fixture_text("lsmod", "01.txt"))
    assert set(fact.modules) == {"irdma", "i40e", "ib_uverbs", "ib_core", "ice"}
    assert fact.modules["irdma"].used_by_count == 0
    assert fact.modules["ib_core"].used_by == ["irdma", "ib_uverbs"]
    assert fact.modules["ice"].size == 1081344
    assert fact.modules["ice"].used_by == ["irdma"]


def test_lsmod_full_listing_with_header():
    fact = parse("lsmod", fixture_text("lsmod", "03.txt"))
    assert len(fact.modules) == 7
    assert fact.modules["ib_core"].used_by_count == 6
    assert "rdma_ucm" in fact.modules["ib_core"].used_by
    assert not fact.loaded("irdma")


def test_modinfo_out_of_tree_ice():
    text = (
        "filename:       /lib/modules/6.12.0-55.el10.x86_64/updates/drivers/net/ethernet/intel/ice/ice.ko\n"
        "version:        1.16.3\nlicense:        GPL v2\nsrcversion:     ABCDEF\n"
        "depends:        gnss\nname:           ice\n"
        "vermagic:       6.12.0-55.el10.x86_64 SMP preempt mod_unload modversions\n"
        "parm:           debug:netif level (0=none,...,16=all) (int)\n"
    )
    fact = parse("modinfo", text)
    assert fact.in_tree is False
    assert fact.version == "1.16.3"
    assert fact.vermagic.startswith("6.12.0-55.el10")
    assert fact.depends == ["gnss"] and fact.parameters == ["debug"]


def test_module_path_classification():
    assert module_in_tree("/lib/modules/6.8.0/kernel/drivers/net/ethernet/intel/ice/ice.ko.zst")
    assert module_in_tree("/lib/modules/5.14/extra/irdma/irdma.ko") is False
    assert module_in_tree("/somewhere/else.ko") is None


@pytest.mark.parametrize(
    ("name", "driver", "version", "firmware", "bus", "in_tree", "nvm"),
    [
        (
            "01.txt",
            "ice",
            "5.19.4-100.fc35.x86_64",
            "4.22 0x80010446 1.3197.0",
            "0000:3b:00.0",
            True,
            "4.22",
        ),
        ("02.txt", "iavf", "5.19.4-100.fc35.x86_64", None, "0000:3b:01.0", True, None),
        ("04.txt", "i40e", "2.8.20-k", "6.00 0x800036cb 1.1747.0", "0000:d8:00.0", True, "6.00"),
        ("06.txt", "mlx4_en", "4.0-0", "2.42.5000", "0000:83:00.0", None, None),
        ("07.txt", "ice", "1.6.7", "3.00 0x80008944 20.5.13", "0000:b1:00.0", False, "3.00"),
    ],
)
def test_ethtool_i(name, driver, version, firmware, bus, in_tree, nvm):
    fact = parse("ethtool-i", fixture_text("ethtool-i", name))
    assert fact.driver == driver
    assert fact.version == version  # trailing spaces in 06 are not part of the value
    assert fact.firmware_version == firmware  # "N/A" in 02 is absent information
    assert fact.bus_info == bus
    assert fact.in_tree is in_tree
    assert fact.nvm_version == nvm


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("6.12.0-55.el10.x86_64", True),
        ("6.8.0-86-generic", True),
        ("1.16.3", None),  # a plain version says nothing without its driver
        ("2.8.20-k", True),
        ("4.0-0", None),
        ("", None),
    ],
)
def test_driver_in_tree(version, expected):
    assert driver_in_tree(version) is expected


@pytest.mark.parametrize(
    ("version", "driver", "expected"),
    [
        ("1.16.3", "ice", False),  # Intel's own ice release
        ("6.8.2", "ice", True),  # a mainline kernel's release, filled in for ice
        ("2.24.6", "i40e", False),
        # Drivers whose own release numbers the table does not know: a plain version that
        # looks like a kernel release may be one or not; null, never a confident false.
        ("6.8.2", "mlx5_core", None),
        ("6.8.2", "irdma", None),
        ("1.16.3", "mlx5_core", None),
    ],
)
def test_driver_in_tree_of_a_plain_version_needs_a_known_driver(version, driver, expected):
    assert driver_in_tree(version, driver) is expected


def test_ethtool_s_ice_priority_counters():
    fact = parse("ethtool-s", fixture_text("ethtool-s", "01.txt"))
    assert fact.counters["rx_unicast"] == 12117448
    assert fact.counters["tx_priority_3_xoff.nic"] == 0
    assert sorted(fact.prio_pause) == [str(p) for p in range(8)]
    assert fact.prio_pause["3"].rx == 0 and fact.prio_pause["3"].tx == 0
    assert "NIC statistics" not in fact.counters


def test_ethtool_s_mlx5_without_pfc_has_no_pause_map():
    fact = parse("ethtool-s", fixture_text("ethtool-s", "02.txt"))
    assert fact.counters["rx_prio0_packets"] == 845715962
    assert fact.prio_pause == {}


def test_ethtool_s_i40e_port_prefix():
    fact = parse("ethtool-s", fixture_text("ethtool-s", "03.txt"))
    assert "port.tx_priority_3_xoff" in fact.counters
    assert sorted(fact.prio_pause) == [str(p) for p in range(8)]


def test_ethtool_s_sums_nonzero_pause_counts():
    text = "NIC statistics:\n     rx_priority_3_xoff.nic: 12\n     tx_priority_3_xoff.nic: 5\n     rx_prio3_pause: 1\n"
    fact = parse("ethtool-s", text)
    assert fact.prio_pause["3"].rx == 13 and fact.prio_pause["3"].tx == 5


def test_bonding_8023ad_with_down_slave_and_lacp_details():
    fact = parse("bonding", fixture_text("bonding", "01.txt"))
    assert fact.is_8023ad and fact.mode == "IEEE 802.3ad Dynamic link aggregation"
    assert fact.transmit_hash_policy == "layer3+4"
    assert fact.lacp_rate == "fast"
    assert fact.active_aggregator_id == 2
    first, second = fact.slaves
    assert (first.name, first.mii_status, first.speed_mbps, first.duplex) == (
        "enp1s0f0",
        "down",
        None,
        None,
    )
    assert (first.aggregator_id, first.link_failure_count) == (1, 2)
    assert first.permanent_hw_addr == "00:25:90:85:81:f2"
    assert (second.name, second.mii_status, second.speed_mbps, second.aggregator_id) == (
        "enp1s0f1",
        "up",
        1000,
        2,
    )


def test_bonding_active_backup_without_aggregators():
    fact = parse("bonding", fixture_text("bonding", "03.txt"))
    assert not fact.is_8023ad
    assert fact.transmit_hash_policy is None
    assert fact.active_slave == "eth2"
    assert [s.name for s in fact.slaves] == ["eth3", "eth2"]
    assert fact.slaves[0].permanent_hw_addr is None
    assert fact.slaves[0].aggregator_id is None
    assert fact.slaves[1].speed_mbps == 100


def test_bonding_as_non_root_hides_active_aggregator():
    fact = parse("bonding", fixture_text("bonding", "04.txt"))
    assert fact.is_8023ad and fact.transmit_hash_policy == "layer2"
    assert fact.active_aggregator_id is None
    assert [s.aggregator_id for s in fact.slaves] == [2, 2]
    assert [s.speed_mbps for s in fact.slaves] == [10000, 10000]


def test_bonding_rejects_other_text():
    with pytest.raises(ParseError, match="Bonding Mode"):
        parse("bonding", "MII Status: up\n")
