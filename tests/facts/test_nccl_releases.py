"""NCCL logs and nccl-tests tables from many releases, as people posted them.

The files under tests/fixtures/nccl-releases and nccl-tests-tables are real outputs from
public issues (each names its source on its first line), NCCL 2.7 to 2.30, with the wording
changes between releases: "Bootstrap : Using" (to 2.23) and "Bootstrap: Using" (2.24 on),
a banner printed bare (to 2.21) or as an INFO line, GDRDMA/Shared channels, mpirun's
--tag-output prefixes, prefixes stripped by the reporter, excerpts cut mid-table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steps.nccl import explain_verdict
from wizard.facts import parse
from wizard.model import Severity
from wizard.probe import Report

HERE = Path(__file__).resolve().parents[1] / "fixtures"
RELEASES = HERE / "nccl-releases"
TABLES = HERE / "nccl-tests-tables"


def text(name: str, folder: Path = RELEASES) -> str:
    return (folder / name).read_text()


@pytest.mark.parametrize(
    ("name", "version", "verdict", "bootstrap_if"),
    [
        ("nccl-2.10.3-intel-e810-roce.log", "2.10.3", "no-net", "enp216s0f1"),
        ("nccl-2.18.5-no-ib-device.log", "2.18.5", "no-net", "eno1"),
        ("nccl-2.18.5-roce.log", "2.18.5", "no-net", "enp24s0np0"),
        ("nccl-2.18.x-connect-failed.log", None, "socket", None),
        ("nccl-2.19-2.20-gdrdma-p2p-cumem.log", None, "gdr", "ibs1130f0"),
        ("nccl-2.19-2.21-dmabuf-ibext-sharp.log", None, "no-net", None),
        ("nccl-2.19-2.21-roce-gdrdma.log", None, "gdr", None),
        ("nccl-2.19.3-no-ib-device.log", "2.19.3", "socket", "ens7"),
        ("nccl-2.19.3-roce.log", "2.19.3", "no-net", "enp220s0np0"),
        ("nccl-2.20.3-ib-completion-error.log", None, "no-net", None),
        ("nccl-2.20.5-shm.log", None, "no-net", None),
        ("nccl-2.20.5-socket-no-ibverbs.log", "2.20.5", "socket", "eth0"),
        ("nccl-2.21.5-ib-no-gdrdma-ece.log", None, "host-memory", "net1"),
        ("nccl-2.21.5-p2p-cumem.log", "2.21.5", "no-net", "ib0"),
        ("nccl-2.21.5-plugin-not-found.log", "2.21.5", "no-net", "eth0"),
        ("nccl-2.22.3-p2p-cumem.log", None, "no-net", None),
        ("nccl-2.22.x-ib-no-gdrdma.log", None, "host-memory", None),
        ("nccl-2.24.3-ext-plugin-nvls.log", "2.24.3", "no-net", "eth0"),
        ("nccl-2.25.1-no-ib-device.log", "2.25.1", "socket", "eno1"),
        ("nccl-2.25.1-roce-k8s.log", "2.25.1", "no-net", "eth0"),
        ("nccl-2.25.1-socket-no-ibverbs.log", "2.25.1", "socket", "ens49f1np1"),
        ("nccl-2.26.5-bootstrap.log", "2.26.5", "no-net", "bond0"),
        ("nccl-2.27-preview-gdrdma-shared-mpirun-tagged.log", None, "gdr", None),
        ("nccl-2.27.5-no-ib-device.log", "2.27.5", "socket", None),
        ("nccl-2.29.2-p2p-shm-disabled.log", "2.29.2", "no-net", "eth0"),
        ("nccl-2.30.x-roce.log", None, "no-net", None),
        ("nccl-2.7.6-intranode-net-gdrdma.log", "2.7.6", "gdr", "ib8"),
        ("nccl-gdr-disabled-for-hca.log", None, "no-net", None),
        ("nccl-unknown-version-gdrdma-shared.log", None, "gdr", None),
    ],
)
def test_each_release_reads_to_its_verdict(name, version, verdict, bootstrap_if):
    log = parse("nccl-log", text(name))
    assert (log.version, log.verdict) == (version, verdict)
    assert (log.bootstrap or {}).get("if") == bootstrap_if


def test_every_release_file_names_its_source():
    files = sorted(RELEASES.iterdir()) + sorted(TABLES.iterdir())
    assert len(files) >= 30
    for path in files:
        assert path.read_text().startswith("# source: "), path.name


def test_versions_from_many_releases():
    versions = {parse("nccl-log", text(p.name)).version for p in RELEASES.iterdir()}
    minors = {v.rsplit(".", 1)[0] for v in versions if v}
    assert {"2.18", "2.19", "2.20", "2.21", "2.24", "2.25", "2.26", "2.27", "2.29"} <= minors


def test_the_intel_e810_log_names_its_roce_device():
    log = parse("nccl-log", text("nccl-2.10.3-intel-e810-roce.log"))
    assert [(d.name, d.link_layer) for d in log.net_devices][:1] == [("rocep216s0f1", "RoCE")]


def test_gdr_disabled_for_an_hca_is_read():
    log = parse("nccl-log", text("nccl-gdr-disabled-for-hca.log"))
    assert any(d["hca"] == "mlx5_0" for d in log.gdr_disabled)


@pytest.mark.parametrize(
    ("name", "meaning"),
    [
        ("nccl-2.18.x-connect-failed.log", "could not connect to its peer"),
        ("nccl-2.20.3-ib-completion-error.log", "reported an asynchronous error"),
        ("nccl-2.29.2-p2p-shm-disabled.log", "could not open a socket"),
    ],
)
def test_a_fatal_warning_fails_the_path_with_its_meaning(name, meaning):
    report = Report("T11")
    explain_verdict(parse("nccl-log", text(name)), {}, "intel-e810", report)
    path = next(f for f in report.findings if f.check == "T11.nccl-path")
    assert path.severity is Severity.FAIL and meaning in path.message
    assert "NCCL WARN" in path.message
    gdr = next(f for f in report.findings if f.check == "T12.gdr")
    assert gdr.severity is Severity.FAIL


@pytest.mark.parametrize(
    ("name", "rows", "avg", "first"),
    [
        ("nccl-tests-new-table.txt", 31, 70.742, ("sum", -1)),
        ("nccl-tests-newest-table.txt", 8, 142.652, ("sum", -1)),
        ("nccl-tests-old-table-redop.txt", 6, None, ("sum", None)),
        # 11 cells: neither redop nor root (the all_reduce_perf of NCCL 2.6's days)
        ("nccl-tests-2.6-table-no-redop-no-root.txt", 12, 6.6972, (None, None)),
        ("nccl-tests-table-no-header.txt", 15, 70.742, ("sum", -1)),
        ("nccl-tests-table-no-header-2.txt", 5, 95.3009, ("sum", -1)),
    ],
)
def test_nccl_tests_tables_old_and_new(name, rows, avg, first):
    table = parse("nccl-tests", text(name, TABLES))
    assert (len(table.rows), table.avg_busbw) == (rows, avg)
    assert (table.rows[0]["redop"], table.rows[0]["root"]) == first


def test_an_old_table_without_redop_keeps_its_root():
    """An old broadcast/all_gather header: ``size count type root time ...`` (12 cells)."""
    table = parse("nccl-tests", text("nccl-tests-old-broadcast-root.txt", TABLES))
    rootful = [r for r in table.rows if r["redop"] is None]
    assert rootful and rootful[0]["root"] == 0 and rootful[0]["oop_time_us"] == 45.82
