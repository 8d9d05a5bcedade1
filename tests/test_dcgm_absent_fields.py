"""DCGM's memory and link checks judge only what the exporter exports (cluster-r1 M5).

The GPU Operator's dcgm-exporter reads the site's own metrics csv when
``dcgmExporter.config.name`` is set (gpu-operator v26.7.0 controllers/object_controls.go),
which may leave out the row-remap and link fields of the default counters
(dcgm-exporter etc/dcp-metrics-included.csv). An absent field is "not judged", a warning
naming it, never an OK."""

from __future__ import annotations

import pytest

from simulator.dcgm import exporter_page
from tests.test_dcgm_metrics import lab_host, verdicts
from wizard.model import Severity


def only(*fields: str) -> str:
    """The lab's exporter page with only ``fields`` (their HELP/TYPE lines and samples)."""
    return "\n".join(
        line for line in exporter_page(lab_host()).splitlines()
        if any(f"{field}{sep}" in line for field in fields for sep in ("{", " "))
    ) + "\n"  # fmt: skip


TEMP_AND_XID = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS")


@pytest.mark.parametrize(
    ("check", "missing"),
    [
        ("T01.dcgm.memory", ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")),
        ("T01.dcgm.links", ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")),
    ],
)  # fmt: skip
def test_a_check_whose_metrics_are_not_exported_warns_not_judged(check, missing):
    page = only(*TEMP_AND_XID)
    assert "DCGM_FI_DEV_GPU_TEMP{" in page and "ROW_REMAP" not in page
    found = verdicts(page)[check]
    assert found.severity is Severity.WARN, found.message
    assert "not judged" in found.message
    for field in missing:
        assert field in found.message


def test_a_partly_exported_check_names_the_field_it_lacks():
    page = only(
        *TEMP_AND_XID, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
    )
    found = verdicts(page)
    assert found["T01.dcgm.memory"].severity is Severity.WARN
    assert "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" in found["T01.dcgm.memory"].message
    assert found["T01.dcgm.links"].severity is Severity.WARN
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" in found["T01.dcgm.links"].message


def test_the_full_default_page_still_passes():
    found = verdicts(exporter_page(lab_host()))
    assert found["T01.dcgm.memory"].severity is Severity.PASS
    assert found["T01.dcgm.links"].severity is Severity.PASS
