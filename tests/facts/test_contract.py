"""The parse contract for every kind: fixtures parse to JSON with the FACTS.md keys, other
kinds' output and garbage fail with ParseError only, and the `parse` command behaves."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import fixture_files, run_cli
from wizard.facts import KINDS, ParseError, parse

# The keys FACTS.md promises for each kind (a parser may add more).
REQUIRED_KEYS = {
    "os-release": {"id", "version_id", "name", "pretty_name", "id_like"},
    "ethtool-i": {"driver", "version", "firmware_version", "bus_info", "in_tree"},
    "bonding": {"mode", "is_8023ad", "transmit_hash_policy", "mii_status", "lacp_rate",
                "active_aggregator_id", "slaves"},
    "lsmod": {"modules"},
    "lspci": {"devices"},
    "lspci-acs": {"acs", "any_enabled"},
    "iommu": {"default_domain", "set_via_cmdline", "dmar_enabled"},
    "rdma-link": {"links"},
    "rdma-dev": {"devices"},
    "ibv-devices": {"devices"},
    "ibv-devinfo": {"devices", "errors"},
    "show-gids": {"gids"},
    "nvidia-smi-l": {"gpus"},
    "nvidia-smi": {"driver_version", "cuda_version", "gpus"},
    "nvidia-smi-topo": {"devices", "matrix", "nic_legend", "cpu_affinity", "numa_affinity"},
    "dcb-pfc": {"prio_pfc", "pfc_cap", "delay", "macsec_bypass"},
    "dcb-ets": {"willing", "ets_cap", "cbs", "tc_bw", "tc_tsa", "prio_tc"},
    "dcb-app": {"dscp_prio"},
    "ethtool-s": {"counters", "prio_pause"},
    "perftest": {"test", "device", "link_type", "transport", "mtu", "gid_index", "qps",
                 "rdma_cm", "tos", "units", "results", "error", "warnings"},
    "nccl-log": {"version", "net_devices", "oob", "socket_only", "env", "dmabuf_gpus",
                 "gdr_disabled", "channels", "verdict"},
    "nccl-tests": {"rows", "avg_busbw", "out_of_bounds"},
    "containerd-version": {"version", "major", "minor", "patch", "revision"},
    "kube-nodes": {"nodes"},
    "kube-node-resources": {"capacity", "allocatable"},
    "kube-pods": {"pods", "healthy"},
    "dcgm-metrics": {"gpus", "metrics", "driver_version"},
    "helm-values": {"values"},
    "modinfo": {"filename", "version", "vermagic", "in_tree"},
    # Kinds the probes need beyond FACTS.md.
    "ethtool-priv-flags": {"interface", "flags"},
    "ip-addr": {"interfaces"},
    "packages": {"installed", "missing"},
    "rdma-hw-counters": {"device", "port", "counters"},
}  # fmt: skip

# Outputs that really are valid input of another kind: ethtool's "key: value" lines are
# also a YAML mapping of Helm values, and that NCCL log fixture carries an nccl-tests table.
LEGITIMATE_OVERLAPS = {
    ("helm-values", "ethtool-i"),
    ("helm-values", "ethtool-s"),
    ("nccl-tests", "nccl-log"),
}

FIXTURES = fixture_files()


def test_every_facts_kind_has_a_parser():
    assert set(KINDS) == set(REQUIRED_KEYS)


def test_every_fixture_kind_is_a_parser_kind():
    assert FIXTURES, "no fixtures found: is ../shared beside the repo?"
    assert {kind for kind, _ in FIXTURES} <= set(KINDS)


@pytest.mark.parametrize(("kind", "path"), FIXTURES, ids=lambda v: getattr(v, "name", v))
def test_fixture_parses_to_json_with_contract_keys(kind, path):
    fact = parse(kind, path.read_text())
    data = json.loads(json.dumps(fact.to_json()))
    assert REQUIRED_KEYS[kind] <= set(data)


@pytest.mark.parametrize("kind", sorted(REQUIRED_KEYS))
def test_other_kinds_output_is_refused(kind):
    for other, path in FIXTURES:
        if other == kind or (kind, other) in LEGITIMATE_OVERLAPS:
            continue
        with pytest.raises(ParseError):
            parse(kind, path.read_text())


@pytest.mark.parametrize("kind", sorted(REQUIRED_KEYS))
@pytest.mark.parametrize("text", ["", "   \n\n", "\x00\x01\x02ELF\x7f", "# source: x\n# note: y\n"])
def test_empty_and_binary_input_is_refused(kind, text):
    with pytest.raises(ParseError):
        parse(kind, text)


def test_colour_codes_and_crlf_are_text_but_control_bytes_are_not():
    coloured = "# source: x\r\n\x1b[32mh:1:2 [0] NCCL INFO NCCL version 2.21.5\x1b[0m\r\n"
    assert parse("nccl-log", coloured).version == "2.21.5"
    with pytest.raises(ParseError, match="binary"):
        parse("nccl-log", "h:1:2 [0] NCCL INFO NCCL version 2.21.5\n\x07")


def _mangle(text: str, data: st.DataObject) -> str:
    lines = text.splitlines(keepends=True)
    operation = data.draw(st.sampled_from(["truncate", "drop", "shuffle", "insert", "tabs"]))
    if operation == "truncate":
        return text[: data.draw(st.integers(0, len(text)))]
    if operation == "drop" and lines:
        index = data.draw(st.integers(0, len(lines) - 1))
        return "".join(lines[:index] + lines[index + 1 :])
    if operation == "shuffle":
        return "".join(data.draw(st.permutations(lines)))
    if operation == "insert":
        index = data.draw(st.integers(0, len(lines)))
        noise = data.draw(st.text(max_size=80))
        return "".join([*lines[:index], noise + "\n", *lines[index:]])
    return text.replace(" ", "\t")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mangled_fixtures_only_raise_parse_error(data):
    _kind, path = data.draw(st.sampled_from(FIXTURES))
    target = data.draw(st.sampled_from(sorted(KINDS)))
    text = _mangle(path.read_text(), data)
    try:
        fact = parse(target, text)
    except ParseError:
        return
    json.dumps(fact.to_json())  # whatever parsed must serialise


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(REQUIRED_KEYS)), text=st.text(max_size=400))
def test_random_text_only_raises_parse_error(kind, text):
    try:
        fact = parse(kind, text)
    except ParseError:
        return
    json.dumps(fact.to_json())


def test_parse_cli_prints_json():
    path = next(path for kind, path in FIXTURES if kind == "bonding" and path.name == "01.txt")
    result = run_cli("parse", "bonding", str(path))
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == parse("bonding", path.read_text()).to_json()
    assert (printed["is_8023ad"], printed["transmit_hash_policy"]) == (True, "layer3+4")
    assert [slave["name"] for slave in printed["slaves"]] == ["enp1s0f0", "enp1s0f1"]


def test_parse_cli_reads_stdin():
    result = run_cli("parse", "containerd-version", "-", stdin="containerd x v2.1.4 abc\n")
    assert result.returncode == 0
    assert json.loads(result.stdout)["version"] == "2.1.4"


def test_parse_cli_unusable_input_is_one_line_exit_1():
    result = run_cli("parse", "lsmod", "-", stdin="this is not lsmod output\n")
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_parse_cli_list_and_unknown_kind():
    listing = run_cli("parse", "--list")
    assert listing.returncode == 0
    assert {line.split()[0] for line in listing.stdout.splitlines()} == set(KINDS)
    unknown = run_cli("parse", "nope", "-", stdin="x")
    assert unknown.returncode == 2 and "parse --list" in unknown.stderr


def test_parse_cli_missing_file():
    result = run_cli("parse", "lsmod", "/nonexistent/file")
    assert result.returncode == 2 and "cannot read" in result.stderr


HOSTILE = {
    "deep JSON": "[" * 5000,
    "deep JSON object": '{"a":' * 5000,
    "a 5000-digit number": "9" * 5000,
    "a 5000-digit JSON number": '{"x": ' + "9" * 5000 + "}",
    "NUL bytes": "\0" * 10_000,
    "one long line": "x" * 200_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_only_ever_raises_the_parse_error_and_quickly(name):
    """Every kind, in well under a second each on an idle machine; the bound is loose (a
    quadratic parser takes minutes here) so that a loaded CI machine does not fail it."""
    import contextlib
    import time

    text = HOSTILE[name]
    started = time.monotonic()
    for kind in sorted(KINDS):
        with contextlib.suppress(ParseError):
            parse(kind, text)
    assert time.monotonic() - started < 30, name


def test_input_over_the_size_cap_is_refused_before_parsing(monkeypatch):
    import wizard.facts as facts

    monkeypatch.setattr(facts, "MAX_INPUT_BYTES", 1000)
    with pytest.raises(ParseError, match="more than"):
        parse("lsmod", "Module Size Used by\n" + "x 1 0\n" * 500)
