"""The site file: defaults from DOMAIN.md, precise errors, no secrets, change tracking."""

from __future__ import annotations

import pytest

from tests.conftest import MINIMAL_SITE, run_cli, with_nodes
from wizard.artifacts import render
from wizard.errors import SiteError
from wizard.site import load_site, parse_site


def problems(text: str) -> list[str]:
    with pytest.raises(SiteError) as info:
        parse_site(text)
    return info.value.problems


def test_defaults_follow_the_domain_brief():
    site = parse_site(MINIMAL_SITE)
    node = site.nodes[0]
    assert node.os == "rhel-10.2" and node.gpu_count == 8 and node.bond.name == "bond1"
    assert node.bond.mode == "802.3ad" and node.bond.xmit_hash_policy == "layer3+4"
    assert site.cluster.kubernetes_version == "1.33"
    assert site.versions.gpu_operator == "v26.7.0" and site.versions.driver == "595.91.07"
    assert site.versions.kernel_module_type == "auto"
    assert site.nic.profile == "intel-e810"
    assert site.device_plugin.resource_name == "rdma/e810"
    qos = site.qos
    assert (qos.dscp, qos.roce_tos, qos.priority, qos.traffic_class) == (24, 96, 3, 3)
    assert qos.pfc_priorities == [3] and qos.ecn is False
    assert site.labels == {"accelerator": "nvidia-b300"}
    assert site.taint.enabled is False and site.taint.effect == "NoSchedule"


def test_init_example_is_valid_and_describes_one_b300_node():
    site = parse_site(render("site/example-site.yaml.j2", name="example"))
    assert len(site.nodes) == 1 and site.nodes[0].gpu_count == 8
    assert site.nodes[0].os == "rhel-10.2"
    assert len(site.nodes[0].bond.ports) == 2
    assert len(site.aistor.peers) == 1


def test_errors_name_the_field_the_value_and_what_is_allowed():
    text = MINIMAL_SITE.replace(
        "rdma_ip: 192.168.50.1\n", "rdma_ip: 192.168.50.1\n    os: centos-7\n"
    )
    [message] = problems(text)
    assert message.startswith("nodes[0].os: 'centos-7' is not allowed")
    assert "rhel-10.2" in message and "ubuntu-24.04" in message


def test_unknown_keys_are_errors_with_the_allowed_keys():
    [message] = problems(MINIMAL_SITE + "qos:\n  pfc_prioritys: [3]\n")
    assert "qos.pfc_prioritys: unknown key" in message
    assert "pfc_priorities" in message


def test_secret_keys_get_a_hint():
    [message] = problems(MINIMAL_SITE + "registry:\n  password: hunter2\n")
    assert "registry.password" in message and "password_env" in message


def test_interface_names_are_validated():
    text = MINIMAL_SITE.replace("ens5f1np1", "'ens5f1; reboot'")
    [message] = problems(text)
    assert "nodes[0].bond.ports[1]" in message and "not a valid interface name" in message


def test_bond_ports_must_differ():
    [message] = problems(MINIMAL_SITE.replace("ens5f1np1", "ens5f0np0"))
    assert "must be different" in message


def test_every_problem_is_reported_at_once():
    text = MINIMAL_SITE.replace("10.0.0.1", "not a host!").replace("ens5f1np1", "x/y")
    found = problems(text + "nic: {profile: connectx-9}\n")
    assert len(found) == 3


def test_tos_must_match_dscp():
    [message] = problems(MINIMAL_SITE + "qos: {dscp: 24, tos: 100}\n")
    assert "ToS = DSCP x 4 = 96" in message


def test_e810_has_one_lossless_class_and_tc_equals_priority():
    [message] = problems(MINIMAL_SITE + "qos: {pfc_priorities: [3, 4]}\n")
    assert "one lossless" in message
    [message] = problems(MINIMAL_SITE + "qos: {traffic_class: 5}\n")
    assert "must equal qos.priority" in message


def test_pfc_must_cover_the_roce_priority():
    [message] = problems(MINIMAL_SITE + "qos: {pfc_priorities: [4]}\n")
    assert "must include the RoCE priority 3" in message


def test_old_rdma_plugin_is_refused():
    [message] = problems(MINIMAL_SITE + "device_plugin: {version: v1.5.1}\n")
    assert "reject Intel NICs" in message


def test_duplicate_node_names():
    text = MINIMAL_SITE.replace(
        "aistor:",
        "  - name: gpu-1\n    host: 10.0.0.2\n    bond: {ports: [a0, a1]}\n    rdma_ip: 192.168.50.2\naistor:",
    )
    [message] = problems(text)
    assert "nodes[].name must be unique" in message and "gpu-1" in message


def test_yaml_errors_give_the_line():
    [message] = problems("name: x\nnodes: [\n")
    assert "not valid YAML at line" in message


def test_empty_and_non_mapping_files():
    assert "empty" in problems("")[0]
    assert "mapping" in problems("- a\n- b\n")[0]


def test_missing_required_fields():
    found = problems("name: x\nnodes:\n  - host: 10.0.0.1\n")
    assert any(p.startswith("nodes[0].name: required") for p in found)
    assert any(p.startswith("nodes[0].bond: required") for p in found)


def test_ssh_defaults_apply_to_nodes_and_peers_with_overrides():
    text = MINIMAL_SITE + "ssh: {user: ops, port: 2222}\n"
    text = text.replace(
        "    rdma_ip: 192.168.50.1\n", "    rdma_ip: 192.168.50.1\n    ssh: {port: 22}\n"
    )
    site = parse_site(text)
    assert site.nodes[0].ssh.user == "ops" and site.nodes[0].ssh.port == 22
    assert site.nodes[0].ssh.use_sudo
    assert site.aistor.peers[0].ssh.port == 2222


def test_sections_change_only_where_the_site_changed():
    before = parse_site(MINIMAL_SITE).sections()
    after = parse_site(MINIMAL_SITE + "qos: {ecn: true}\n").sections()
    assert {k for k in before if before[k] != after.get(k)} == {"qos"}
    moved = parse_site(MINIMAL_SITE.replace("ens5f1np1", "ens5f1np2")).sections()
    assert {k for k in before if before[k] != moved.get(k)} == {"nodes.gpu-1.bond"}


def test_load_site_names_a_missing_file(tmp_path):
    with pytest.raises(SiteError, match="does not exist"):
        load_site(tmp_path / "nope.yaml")


def test_relative_paths_resolve_next_to_the_site_file(site_file):
    site = load_site(site_file)
    assert site.resolve_path("keys/id") == site_file.parent / "keys" / "id"


def test_cli_bad_site_exits_2_naming_the_field(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text(MINIMAL_SITE.replace("rdma_ip: 192.168.50.1\n", "rdma_ip: 300.1.1.1\n"))
    result = run_cli("export", str(bad), "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "nodes[0].rdma_ip: '300.1.1.1'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_rollout_takes_a_node_count_or_a_percentage():
    site = parse_site(
        MINIMAL_SITE
        + "rollout: {maintenance_batch: 25%, apply_batch: '50%', max_failed_nodes: 10%}\n"
    )
    rollout = site.rollout
    assert (rollout.maintenance_size(64), rollout.apply_size(64), rollout.failure_limit(64)) == (
        16, 32, 6)  # fmt: skip
    assert rollout.maintenance_size(3) == 1  # a percentage batch is at least one node
    assert parse_site(MINIMAL_SITE).rollout.apply_size(5) == 5  # default: all at once
    assert parse_site(MINIMAL_SITE + "rollout: {apply_batch: 2}\n").rollout.apply_size(5) == 2


@pytest.mark.parametrize("value", ["0%", "150%", "abc", "-1", "true", "2.5"])
def test_rollout_errors_say_both_forms(value):
    [message] = problems(MINIMAL_SITE + f"rollout: {{maintenance_batch: {value}}}\n")
    assert message.startswith("rollout.maintenance_batch: ")
    assert "node count (1-256)" in message and "'25%'" in message


@pytest.mark.parametrize("batch", ["2", "100%", "5"])
def test_a_maintenance_batch_never_takes_every_node(batch):
    two = with_nodes(2)
    [message] = problems(two + f"rollout: {{maintenance_batch: {batch}}}\n")
    assert "takes all 2 nodes at once" in message and "at most 1" in message
    assert parse_site(two + "rollout: {maintenance_batch: 50%}\n").rollout.maintenance_size(2) == 1
    assert parse_site(MINIMAL_SITE).rollout.maintenance_size(1) == 1  # one node: a batch of one
