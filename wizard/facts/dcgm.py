"""DCGM Exporter facts: the exporter's ``/metrics`` page (Prometheus text exposition format).

The format is read by prometheus_client's own parser (``text_string_to_metric_families``,
the reference implementation of the format), not by a pattern of ours: label values carry
escapes, help texts carry anything, and a hand-written reader gets those wrong. The parser
is wrapped so that it stays bounded: a line longer than any the exporter writes is refused
before the library sees it (one line is parsed on its own, so the cost is linear in the
input), and any error of the library becomes the one ParseError.

The exporter writes one sample per GPU and field (dcgm-exporter
internal/pkg/rendermetrics/render_metrics.go, gpuMetricsFormat)::

    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-...",pci_bus_id="00000000:18:00.0",
                         device="nvidia0",modelName="NVIDIA B300 SXM6 AC",hostname="..."} 34

and, with MIG, one per GPU instance (``GPU_I_ID``); a GPU's value here is the largest of its
samples, which for the error counters the wizard judges is the one that matters. NVLink and
NVSwitch samples (linkMetricsFormat, ``nvlink=``) have no ``gpu`` label of the same shape
when they belong to a switch and are not GPU facts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean

KIND = "dcgm-metrics"
# The exporter's longest line is a sample with MIG and pod labels (a few hundred
# characters); a line of this length is not its output.
MAX_LINE_CHARS = 16 << 10
# The page of an 8-GPU node with the default counters is about 60 KB, with MIG, per-link
# and pod labels a few hundred KB; a page past this is not the exporter's, and refusing it
# keeps one read bounded in time (the library parses ~0.3 MB/s), below the global cap.
MAX_PAGE_CHARS = 4 << 20
# The gpu label is the GPU's index as DCGM numbers it: ASCII digits (str.isdigit would take
# Unicode digits such as "٣" for 3).
GPU_INDEX = re.compile(r"[0-9]{1,4}")
# Metric names this parser reads as the exporter's: DCGM fields and the exporter's own.
PREFIXES = ("DCGM_FI_", "DCGM_EXP_")
# The labels of a GPU sample (render_metrics.go); the UUID label's name is configurable
# (--use-old-namespace writes "uuid"), the host label was "Hostname" before 4.5.3-4.8.2's
# successor renamed it (dcgm-exporter #655).
UUID_LABELS = ("UUID", "uuid", "gpu_uuid")
MODEL_LABELS = ("modelName", "model_name")
HOST_LABELS = ("hostname", "Hostname")


@dataclass
class DcgmGpu(Fact):
    index: int
    uuid: str | None
    model_name: str | None
    pci_bus_id: str | None
    hostname: str | None
    #: Metric name -> the GPU's value (the largest of its samples); NaN and infinities are
    #: not values (null).
    values: dict[str, float | None] = field(default_factory=dict)
    #: XID error code -> its text, from the DCGM_FI_DEV_XID_ERRORS samples' err_code and
    #: err_msg labels (4.x), for non-zero codes.
    xid_messages: dict[str, str] = field(default_factory=dict)


@dataclass
class DcgmMetrics(Fact):
    gpus: list[DcgmGpu]
    #: Every DCGM metric family on the page, in the order it appeared.
    metrics: list[str]
    #: The driver version label (DCGM_FI_DRIVER_VERSION) when the counters carry it.
    driver_version: str | None = None


@parser(KIND, "GET /api/v1/namespaces/<release-namespace>/pods/<dcgm-exporter>:9400/proxy/metrics")
def parse_dcgm_metrics(text: str) -> DcgmMetrics:
    if len(text) > MAX_PAGE_CHARS:
        raise ParseError(KIND, f"the page is {len(text)} characters, over {MAX_PAGE_CHARS}")
    text = clean(text, KIND)
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_CHARS:
            raise ParseError(KIND, f"line {number} is {len(line)} characters long")
    body = "\n".join(lines) + "\n"
    try:
        families = list(text_string_to_metric_families(body))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ParseError(KIND, f"not the Prometheus text format: {str(exc)[:100]}") from None
    gpus: dict[int, DcgmGpu] = {}
    metrics: list[str] = []
    driver = None
    for family in families:
        if not family.name.startswith(PREFIXES):
            continue
        if family.name not in metrics:  # a sample without # TYPE is a family of its own
            metrics.append(family.name)
        for sample in family.samples:
            # The library names a counter's samples NAME_total (OpenMetrics); the exporter
            # writes them without the suffix, and NAME is what its csv calls the field.
            if sample.name not in (family.name, family.name + "_total"):
                continue
            labels = sample.labels
            index = labels.get("gpu", "")
            if "nvlink" in labels or not GPU_INDEX.fullmatch(index):
                continue
            gpu = gpus.get(int(index))
            if gpu is None:
                gpu = gpus[int(index)] = DcgmGpu(
                    int(index),
                    _first(labels, UUID_LABELS),
                    _first(labels, MODEL_LABELS),
                    labels.get("pci_bus_id"),
                    _first(labels, HOST_LABELS),
                )
            driver = driver or labels.get("DCGM_FI_DRIVER_VERSION")
            value = _finite(sample.value)
            name = family.name
            previous = gpu.values.get(name)
            if value is not None and (previous is None or value > previous):
                gpu.values[name] = value
            elif name not in gpu.values:
                gpu.values[name] = None
            code = labels.get("err_code")
            if name == "DCGM_FI_DEV_XID_ERRORS" and code and code != "0":
                gpu.xid_messages[code] = labels.get("err_msg", "")
    if not gpus:
        raise ParseError(KIND, "no DCGM_FI_* sample with a gpu label")
    return DcgmMetrics([gpus[i] for i in sorted(gpus)], metrics, driver)


def _first(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    return next((labels[n] for n in names if n in labels), None)


def _finite(value: float) -> float | None:
    return value if isinstance(value, int | float) and math.isfinite(value) else None
