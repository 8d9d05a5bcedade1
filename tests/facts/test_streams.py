"""Lines of several ranks in one log (mpirun --tag-output, SkyPilot): the launcher's tag is
the only record of which program printed a line, so a table is read from one stream, and
table lines in more than one stream are refused, never mixed (the reviewer's proof: an
A4000 nvidia-smi under [1,0] interleaved with a B200 one under [1,1] gave the B200 the
A4000's memory)."""

from __future__ import annotations

import itertools

import pytest

from tests.facts.samples_check import SAMPLES
from wizard.facts import ParseError, parse
from wizard.facts.base import strip_line_tags


def _body(kind: str, name: str) -> list[str]:
    text = (SAMPLES / kind / name).read_text()
    return [line for line in text.splitlines() if not line.startswith("# ")]


def _interleave(first: list[str], second: list[str], tags=("[1,0]", "[1,1]")) -> str:
    lines = []
    for one, two in itertools.zip_longest(first, second):
        if one is not None:
            lines.append(f"{tags[0]}<stdout>:{one}")
        if two is not None:
            lines.append(f"{tags[1]}<stdout>:{two}")
    return "\n".join(lines)


def test_the_tag_comes_back_with_each_line_without_the_timestamp():
    text = "2026-06-07T08:16:57.1Z [1,3]<stderr>:hello\nplain\n(head, rank=0, pid=1) x"
    assert strip_line_tags(text) == [
        ("[1,3]", "hello"),
        ("", "plain"),
        ("(head, rank=0, pid=1)", "x"),
    ]


def test_nvidia_smi_of_two_ranks_interleaved_is_refused():
    a4000 = _body("nvidia-smi", "07.txt")
    b200 = _body("nvidia-smi", "01.txt")
    with pytest.raises(ParseError, match=r"2 launcher streams \('\[1,0\]', '\[1,1\]'\)"):
        parse("nvidia-smi", _interleave(a4000, b200))


def test_nvidia_smi_of_one_rank_beside_another_ranks_other_lines_reads_that_rank():
    b200 = _body("nvidia-smi", "01.txt")
    noise = ["NCCL INFO something", "warning: 12 MiB / 34 MiB"] * 20
    plain = parse("nvidia-smi", "\n".join(b200)).to_json()
    assert parse("nvidia-smi", _interleave(noise, b200)).to_json() == plain


def test_nccl_tests_same_table_from_two_ranks_is_refused():
    table = _body("nccl-tests", "03.txt")
    table = [line.removeprefix("[1,0]<stdout>:") for line in table]
    rows = parse("nccl-tests", "\n".join(table)).rows
    assert rows
    with pytest.raises(ParseError, match="launcher streams"):
        parse("nccl-tests", _interleave(table, table))


HEADER = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong"
)
ROW = "     1048576        262144     float     sum      -1    {t}    1.00    {b}      0    {t}    1.00    {b}      0"


def _test(name: str, busbw: str) -> list[str]:
    return [
        f"# Collective test starting: {name}",
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 2(factor)",
        HEADER,
        ROW.format(t="100.0", b=busbw),
        f"# Avg bus bandwidth    : {busbw}",
    ]


def test_nccl_tests_two_tests_in_one_log_are_refused():
    log = "\n".join(_test("all_reduce_perf", "11.00") + _test("all_gather_perf", "22.00"))
    with pytest.raises(ParseError, match=r"all_reduce_perf, all_gather_perf"):
        parse("nccl-tests", log)


def test_nccl_tests_one_test_keeps_its_name_and_rows():
    fact = parse("nccl-tests", "\n".join(_test("all_reduce_perf", "11.00")))
    assert fact.test == "all_reduce_perf"
    assert [row["oop_busbw"] for row in fact.rows] == [11.0]
    assert fact.avg_busbw == 11.0


def test_nccl_tests_two_headers_without_test_names_are_refused():
    one = [line for line in _test("x", "11.00") if "starting" not in line]
    two = [line for line in _test("y", "22.00") if "starting" not in line]
    with pytest.raises(ParseError, match="more than one"):
        parse("nccl-tests", "\n".join(one + two))


@pytest.mark.parametrize(
    ("second", "named"),
    [
        (
            "/sys/class/infiniband/irdma1/ports/1/hw_counters/cnpSent:999",
            "irdma0 port 1, irdma1 port 1",
        ),
        (
            "/sys/class/infiniband/irdma0/ports/2/hw_counters/cnpSent:999",
            "irdma0 port 1, irdma0 port 2",
        ),
    ],
)
def test_rdma_hw_counters_of_a_second_device_or_port_are_refused(second, named):
    """The counters of irdma1 were filed under irdma0 (cnpSent 999 for a device that sent
    5): one fact is one device's port; steps/perf/counters.py greps one at a time."""
    text = "/sys/class/infiniband/irdma0/ports/1/hw_counters/cnpSent:5\n" + second
    with pytest.raises(ParseError, match=named):
        parse("rdma-hw-counters", text)


def test_rdma_hw_counters_of_one_port_through_both_sysfs_paths_are_one_port():
    text = (
        "/sys/class/infiniband/irdma0/ports/1/hw_counters/cnpSent:5\n"
        "/sys/devices/pci0000:00/0000:00:01.0/infiniband/irdma0/ports/1/counters/port_rcv_data:7\n"
    )
    fact = parse("rdma-hw-counters", text)
    assert (fact.device, fact.port, fact.counters) == (
        "irdma0",
        1,
        {"cnpSent": 5, "port_rcv_data": 7},
    )


def _table_without_banner() -> list[str]:
    body = _body("nvidia-smi", "01.txt")
    return [line for line in body if "NVIDIA-SMI" not in line]


def test_nvidia_smi_versions_come_from_the_banner_line_only():
    """A log line that mentions a CUDA version is not the banner."""
    text = "\n".join(["CUDA Version: 12.8 required", *_table_without_banner()])
    fact = parse("nvidia-smi", text)
    assert (fact.driver_version, fact.cuda_version) == (None, None)
    assert [gpu.name for gpu in fact.gpus] == ["NVIDIA B200", "NVIDIA B200"]


def test_nvidia_smi_a_processes_line_before_the_table_does_not_end_it():
    text = "\n".join(["Processes: 3 running", "MIG devices: none", *_body("nvidia-smi", "01.txt")])
    fact = parse("nvidia-smi", text)
    assert fact.driver_version == "610.43.02" and len(fact.gpus) == 2


def test_nvidia_smi_row_shaped_lines_before_the_banner_are_not_gpus():
    row = (
        "|   7  Bogus GPU                     On  |   00000000:1B:00.0 Off |                    0 |"
    )
    fact = parse("nvidia-smi", "\n".join([row, *_body("nvidia-smi", "01.txt")]))
    assert [gpu.index for gpu in fact.gpus] == [0, 1]


LABELS = {
    "srun --label": "{n}: ",
    "srun --label, 10+ tasks": " {n}: ",
    "MPICH -prepend-rank": "[{n}] ",
}


@pytest.mark.parametrize("label", sorted(LABELS))
def test_a_launchers_rank_label_on_every_line_is_stripped(label):
    body = _body("nvidia-smi", "01.txt")
    plain = parse("nvidia-smi", "\n".join(body)).to_json()
    labelled = "\n".join(LABELS[label].format(n=0) + line for line in body)
    assert parse("nvidia-smi", labelled).to_json() == plain


@pytest.mark.parametrize("label", sorted(LABELS))
def test_two_ranks_labelled_interleaved_are_refused(label):
    body = _body("nvidia-smi", "01.txt")
    lines = []
    for line in body:
        lines += [LABELS[label].format(n=0) + line, LABELS[label].format(n=1) + line]
    with pytest.raises(ParseError, match="launcher streams"):
        parse("nvidia-smi", "\n".join(lines))


def test_srun_messages_and_blank_lines_do_not_hide_the_labels():
    body = _body("nvidia-smi", "01.txt")
    plain = parse("nvidia-smi", "\n".join(body)).to_json()
    text = "\n".join(
        ["srun: job 42 queued and waiting for resources", "", *(f"0: {b}" for b in body)]
    )
    assert parse("nvidia-smi", text).to_json() == plain


def test_a_label_like_start_on_some_lines_only_is_content():
    """'0: ' or '[0] ' at the start of a few lines is not a launcher's label (srun and
    MPICH label every line): those lines stay as printed."""
    text = "0: not a label\nplain line\n[1] nor this"
    assert [line for _, line in strip_line_tags(text)] == text.splitlines()
