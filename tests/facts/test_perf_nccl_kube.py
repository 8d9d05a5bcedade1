"""perftest, NCCL logs and nccl-tests tables, kubectl and helm outputs."""

from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_text
from wizard.facts import ParseError, parse


def test_perftest_multi_qp_rdma_cm_with_tos():
    fact = parse("perftest", fixture_text("perftest", "01.txt"))
    assert fact.test == "RDMA_Write BW Test"
    assert (fact.device, fact.qps, fact.gid_index, fact.mtu) == ("mlx5_5", 4, 3, 4096)
    assert fact.rdma_cm is True and fact.tos == 41
    assert fact.link_type == "Ethernet" and fact.units == "Gb/sec"
    assert fact.results == [
        {"bytes": 65536, "iterations": 20000, "bw_peak": 98.01, "bw_average": 98.01,
         "msg_rate_mpps": 0.186932}
    ]  # fmt: skip
    assert fact.error is None and fact.best_bw_gbps == 98.01


def test_perftest_irdma_mb_per_second():
    fact = parse("perftest", fixture_text("perftest", "02.txt"))
    assert (fact.device, fact.units, fact.rdma_cm, fact.tos) == ("irdma1", "MB/sec", False, None)
    assert fact.results[0]["bw_average"] == 1103.38
    assert fact.best_bw_gbps == pytest.approx(8.827, abs=0.001)


def test_perftest_connection_failure():
    fact = parse("perftest", fixture_text("perftest", "03.txt"))
    assert fact.results == [] and fact.test is None
    assert "Couldn't connect to 192.168.125.211:18515" in fact.error


def test_perftest_bad_arguments():
    fact = parse("perftest", fixture_text("perftest", "05.txt"))
    assert "CUDA DMA-BUF cannot be used without CUDA" in fact.error
    assert "Parser function exited with Error" in fact.error


def test_perftest_cuda_server_preamble_is_a_warning():
    fact = parse("perftest", fixture_text("perftest", "06.txt"))
    assert fact.test == "RDMA_Write BW Test" and fact.device == "mlx5_0"
    assert fact.results == [] and fact.error is None
    assert any("inline size set to 0" in w for w in fact.warnings)


def test_perftest_post_list_duration_row_with_tabs():
    fact = parse("perftest", fixture_text("perftest", "08.txt"))
    assert fact.test == "RDMA_Write Post List BW Test"
    assert fact.results[0]["bytes"] == 8 and fact.results[0]["bw_peak"] == 0.0
    assert fact.results[0]["msg_rate_mpps"] == 7.498617


def test_perftest_latency_table():
    text = (
        "                    Send Latency Test\n"
        " Device         : irdma0\n Number of qps   : 1\t\tTransport type : IB\n"
        " Link type       : Ethernet\n GID index       : 3\n"
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
        "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
        " 2       1000          2.61           7.44         2.71               2.75"
        "           0.14            3.40                   7.44   \n"
    )
    fact = parse("perftest", text)
    assert fact.kind == "lat" and fact.test == "Send Latency Test"
    row = fact.results[0]
    assert (row["t_min_us"], row["t_typical_us"], row["p99_us"], row["p99_9_us"]) == (
        2.61,
        2.71,
        3.40,
        7.44,
    )


def test_nccl_log_gdr_on_every_channel():
    fact = parse("nccl-log", fixture_text("nccl-log", "01.txt"))
    assert fact.version == "2.16.5" and fact.cuda == "11.8"
    assert [(d.index, d.name, d.link_layer) for d in fact.net_devices] == [
        (0, "mlx5_0", "RoCE"), (1, "mlx5_2", "IB")]  # fmt: skip
    assert fact.oob == {"if": "ibp209s0f0", "ip": "10.128.3.13"}
    assert fact.env == {"NCCL_NET_GDR_LEVEL": "SYS"}
    assert fact.dmabuf_gpus == [0]
    assert len(fact.channels) == 6
    assert all(c.transport == "NET/IB" and c.device_index == 1 and c.gdr for c in fact.channels)
    assert [c.shared for c in fact.channels].count(True) == 2
    assert {c.direction for c in fact.channels} == {"send", "receive"}
    assert fact.verdict == "gdr" and not fact.socket_only


def test_nccl_log_roce_without_channels():
    fact = parse("nccl-log", fixture_text("nccl-log", "02.txt"))
    assert fact.version == "2.19.3"
    assert [d.name for d in fact.net_devices] == ["mlx5_10", "mlx5_11"]
    assert fact.oob == {"if": "enp220s0np0", "ip": "11.1.128.136"}
    assert fact.verdict == "no-net"


def test_nccl_log_gdr_disabled_for_hcas():
    fact = parse("nccl-log", fixture_text("nccl-log", "04.txt"))
    assert fact.gdr_disabled == [
        {"hca": "mlx5_0", "index": 0, "reason": None},
        {"hca": "mlx5_1", "index": 1, "reason": None},
    ]


def test_nccl_log_socket_fallback_without_rdma_device():
    fact = parse("nccl-log", fixture_text("nccl-log", "05.txt"))
    assert fact.socket_only and fact.verdict == "socket"
    assert fact.net_devices == []


def test_nccl_log_forced_sockets_env():
    fact = parse("nccl-log", fixture_text("nccl-log", "06.txt"))
    assert fact.env == {
        "NCCL_IBEXT_DISABLE": "1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "lo",
    }
    assert fact.verdict == "socket"
    assert fact.gdr_disabled == [{"hca": "lo", "index": 0, "reason": None}]


def test_nccl_log_prefix_stripped_plugin_lines():
    fact = parse("nccl-log", fixture_text("nccl-log", "07.txt"))
    assert fact.dmabuf_gpus == [0] and fact.verdict == "no-net"


def test_nccl_log_old_wording():
    fact = parse("nccl-log", fixture_text("nccl-log", "10.txt"))
    assert fact.version == "2.4.7"
    assert [(d.name, d.link_layer) for d in fact.net_devices] == [("mlx5_0", "IB")]
    assert fact.oob == {"if": "ib0", "ip": "192.168.11.1"}
    assert fact.env == {"NCCL_IB_DISABLE": "0"}


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        ("Channel 00/0 : 0[81000] -> 1[81000] [send] via NET/IB/0", "host-memory"),
        ("Channel 00/0 : 0[81000] -> 1[81000] [send] via NET/Socket/0", "socket"),
        ("Channel 00/0 : 0[81000] -> 1[81000] [send] via NET/IBext_v8/0/GDRDMA", "gdr"),
        ("Channel 00 : 2[c7000] -> 0[87000] via P2P/IPC", "no-net"),
    ],
)
def test_nccl_channel_verdicts(line, verdict):
    fact = parse("nccl-log", f"host:1:2 [0] NCCL INFO {line}\n")
    assert fact.verdict == verdict


def test_nccl_mixed_verdict():
    text = (
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[1] -> 1[1] [send] via NET/IB/0/GDRDMA\n"
        "h:1:2 [0] NCCL INFO Channel 01/0 : 0[1] -> 1[1] [send] via NET/IB/0\n"
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'irdma0' (no module)\n"
    )
    fact = parse("nccl-log", text)
    assert fact.verdict == "mixed"
    assert fact.gdr_disabled == [{"hca": "irdma0", "index": 0, "reason": "no module"}]


def test_nccl_large_log_keeps_every_channel_in_order():
    """A long multi-rank log: each line counts, in order, and one odd line changes the verdict."""
    gdr = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[1] -> 1[1] [send] via NET/IB/0/GDRDMA\n"
    receive = "h:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[1] [receive] via NET/IB/1/GDRDMA\n"
    noise = "h:1:2 [0] NCCL INFO Connected all rings\n"
    host_memory = "h:9:9 [3] NCCL INFO Channel 02/0 : 3[1] -> 0[1] [send] via NET/IB/1\n"
    text = (gdr + noise + receive) * 5000 + host_memory + gdr * 10
    fact = parse("nccl-log", text)
    assert len(fact.channels) == 10_011
    assert [(c.channel, c.direction) for c in fact.channels[:3]] == [(0, "send"), (1, "receive"),
                                                                     (0, "send")]  # fmt: skip
    assert fact.channels[10_000].device_index == 1 and not fact.channels[10_000].gdr
    assert fact.verdict == "mixed"
    assert parse("nccl-log", (gdr + noise + receive) * 5000).verdict == "gdr"


def test_nccl_channel_is_read_within_one_line():
    text = (
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[1] -> 1[1] [send]\n"
        "h:1:2 [0] NCCL INFO via NET/IB/0/GDRDMA\n"
        "h:1:2 [0] NCCL INFO Channel 01/0 : 0[1] -> 1[1] [send] via NET/Socket/0\n"
    )
    fact = parse("nccl-log", text)
    assert [(c.channel, c.transport) for c in fact.channels] == [(1, "NET/Socket")]
    assert fact.verdict == "socket"


def test_nccl_first_version_line_wins_and_later_env_overrides():
    text = (
        "h:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        "h:1:2 [0] NCCL INFO NCCL_IB_HCA set by environment to irdma0.\n"
        "h:1:3 [1] NCCL INFO NCCL version 2.19.3+cuda12.2\n"
        "h:1:3 [1] NCCL INFO NCCL_IB_HCA set by environment to irdma1\n"
    )
    fact = parse("nccl-log", text)
    assert (fact.version, fact.cuda) == ("2.21.5", "12.4")
    assert fact.env == {"NCCL_IB_HCA": "irdma1"}


def test_nccl_tests_full_table():
    fact = parse("nccl-tests", fixture_text("nccl-tests", "01.txt"))
    assert len(fact.rows) == 31
    assert fact.rows[0]["size"] == 8 and fact.rows[0]["root"] == -1
    last = fact.rows[-1]
    assert (last["size"], last["oop_busbw"], last["ip_busbw"], last["ip_wrong"]) == (
        8589934592, 338.82, 337.35, 0)  # fmt: skip
    assert fact.avg_busbw == 70.742 and fact.out_of_bounds == 0


def test_nccl_tests_header_only_old_format():
    fact = parse("nccl-tests", fixture_text("nccl-tests", "03.txt"))
    assert fact.rows == [] and fact.avg_busbw is None


def test_nccl_tests_with_ssh_warnings_and_version_line():
    fact = parse("nccl-tests", fixture_text("nccl-tests", "04.txt"))
    assert [r["size"] for r in fact.rows] == [1073741824, 10737418240]
    assert fact.rows[1]["oop_algbw"] == 96.03
    assert fact.avg_busbw == 175.531


def test_nccl_tests_old_layout_without_root():
    text = (
        "#       size         count      type   redop     time   algbw   busbw  error"
        "     time   algbw   busbw  error\n"
        "     1048576        262144     float     sum    95.61   10.97   20.56  1e-06"
        "    94.79   11.06   20.74  1e-06\n"
    )
    fact = parse("nccl-tests", text)
    assert fact.rows[0]["root"] is None and fact.rows[0]["oop_busbw"] == 20.56


def test_kube_nodes_plain():
    fact = parse("kube-nodes", fixture_text("kube-nodes", "01.txt"))
    assert len(fact.nodes) == 5
    assert fact.nodes[0].roles == [] and fact.nodes[1].roles == ["node"]
    assert all(n.ready and n.version == "v1.25.6" for n in fact.nodes)
    assert fact.nodes[0].os_image is None


def test_kube_nodes_wide_with_spaces_in_os_image():
    fact = parse("kube-nodes", fixture_text("kube-nodes", "04.txt"))
    node = fact.nodes[1]
    assert node.name == "kubernetes-1-34-0-worker"
    assert node.os_image == "Ubuntu 24.04.2 LTS"
    assert node.kernel_version == "6.8.0-86-generic"
    assert node.container_runtime == "containerd://2.1.4"
    assert node.internal_ip == "10.0.2.17"


def test_kube_node_resources_capacity_only():
    fact = parse("kube-node-resources", fixture_text("kube-node-resources", "03.txt"))
    assert fact.capacity["nvidia.com/gpu"] == "1"
    assert fact.capacity["memory"] == "8125876Ki"
    assert fact.allocatable == {}


def test_kube_pods_crashloop_with_restart_age():
    fact = parse("kube-pods", fixture_text("kube-pods", "02.txt"))
    assert len(fact.pods) == 11 and not fact.healthy
    broken = [p for p in fact.pods if not p.healthy]
    assert [(p.name, p.restarts, p.last_restart) for p in broken] == [
        ("gpu-operator-657c5b798d-xgvgc", 12, "4m24s ago")
    ]


def test_kube_pods_old_restart_format():
    fact = parse("kube-pods", fixture_text("kube-pods", "03.txt"))
    broken = [p.name for p in fact.pods if not p.healthy]
    assert len(broken) == 3 and all("device-plugin" in n for n in broken)
    assert fact.pods[3].restarts == 3 and fact.pods[3].last_restart is None


def test_kube_pods_all_namespaces_completed_validator_is_healthy():
    fact = parse("kube-pods", fixture_text("kube-pods", "04.txt"))
    assert fact.pods[0].namespace == "cattle-system"
    validator = next(p for p in fact.pods if "validator" in p.name)
    assert validator.ready == "0/1" and validator.healthy
    assert fact.healthy


def test_kube_pods_old_operand_set_healthy():
    fact = parse("kube-pods", fixture_text("kube-pods", "06.txt"))
    assert fact.healthy and len(fact.pods) == 6
    assert next(p for p in fact.pods if p.name == "nvidia-driver-validation").restarts == 4


def test_helm_values_forms():
    assert parse("helm-values", "USER-SUPPLIED VALUES:\nnull\n").values == {}
    text = "USER-SUPPLIED VALUES:\ndriver:\n  kernelModuleType: open\n  rdma:\n    enabled: false\n"
    assert parse("helm-values", text).values == {
        "driver": {"kernelModuleType": "open", "rdma": {"enabled": False}}
    }
    assert parse("helm-values", json.dumps({"nfd": {"enabled": True}})).values == {
        "nfd": {"enabled": True}
    }
    with pytest.raises(ParseError):
        parse("helm-values", "Error: release: not found\n")


def test_kube_nodes_beyond_any_one_cluster_is_refused_not_read_whole():
    """#27: a 50 MB 'node list' took 1.7 GB. Kubernetes supports at most 5000 nodes per
    cluster, so past the bound the parser stops with its reason instead of holding every row
    (the rows are read one at a time)."""
    from wizard.facts import kube

    header = "NAME   STATUS   ROLES    AGE   VERSION\n"
    row = "n{:06d}   Ready    <none>   1d    v1.33.4\n"
    at_bound = header + "".join(row.format(i) for i in range(kube.MAX_NODES))
    assert len(parse("kube-nodes", at_bound).nodes) == kube.MAX_NODES
    with pytest.raises(ParseError, match="at most 5000 per cluster"):
        parse("kube-nodes", at_bound + row.format(kube.MAX_NODES))
