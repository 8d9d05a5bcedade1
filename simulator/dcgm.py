"""The dcgm-exporter's /metrics on a lab GPU node: what DCGM reports for its B300 GPUs.

What is modelled is the vendor's page, field by field:

- the fields are the ones the exporter ships enabled (dcgm-exporter 4.x
  etc/default-counters.csv, the same list as etc/dcp-metrics-included.csv that the GPU
  Operator's exporter reads): clocks, temperatures, power, PCIe replays, utilisation, the last
  XID, framebuffer, NVLink bandwidth, vGPU licence, remapped rows and DCP ratios, each with
  the csv's HELP text and type;
- each sample is written as internal/pkg/rendermetrics/render_metrics.go's gpuMetricsFormat
  writes it (``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``hostname``, then
  the csv's label fields such as ``DCGM_FI_DRIVER_VERSION``); XID_ERRORS carries ``err_code``
  and ``err_msg`` (3.3.6-3.4.2 on, dcgm-exporter #308; code 0 reads "No Error": index 0 of
  the exporter's xid_errors.go table since 4.0.0, dcgm-exporter #437);
- one block per GPU the driver sees (the fault gpu-missing: one fewer), UUIDs and bus ids
  as the host's nvidia-smi -L and lspci print them.

The fault gpu-xid is XID 79 on GPU 3 ("GPU has fallen off the bus", NVIDIA's XID catalogue),
the last XID the exporter then reports for it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from simulator.faults import Fault

if TYPE_CHECKING:
    from simulator.host import HostState

MODEL = "NVIDIA B300 SXM6 AC"
DRIVER = "595.91.07"
BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]  # simulator/host/pci.py's slots
XID_GPU, XID_CODE, XID_MESSAGE = 3, 79, "GPU has fallen off the bus"


def _counters(text: str) -> list[tuple[str, str, str]]:
    """(field, type, help) of each line of a dcgm-exporter counters csv, in its order (the
    exporter's format: ``DCGM FIELD, Prometheus metric type, help message``; ``#`` lines
    are comments)."""
    rows = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            field, kind, help_text = (part.strip() for part in line.split(",", 2))
            rows.append((field, kind, help_text))
    return rows


# default-counters.csv's enabled lines, in its order: the lab's copy of that file.
FIELDS = _counters((Path(__file__).parent / "dcgm-default-counters.csv").read_text())

# An idle B300 (288 GB HBM3e: 294912 MiB less the driver's reservation).
IDLE = {
    "DCGM_FI_DEV_SM_CLOCK": "345", "DCGM_FI_DEV_MEM_CLOCK": "3996",
    "DCGM_FI_DEV_MEMORY_TEMP": "31", "DCGM_FI_DEV_GPU_TEMP": "29",
    "DCGM_FI_DEV_POWER_USAGE": "141.229000", "DCGM_FI_DEV_FB_FREE": "286967",
    "DCGM_FI_DEV_FB_USED": "0", "DCGM_FI_DEV_FB_RESERVED": "7945",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "0", "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "0",
}  # fmt: skip


def exporter_page(host: HostState) -> str:
    """The page ``GET :9400/metrics`` of the exporter on ``host`` answers with."""
    gpus = range(host.gpus_present)
    xid = Fault.GPU_XID in host.faults
    out = []
    for name, kind, help_text in FIELDS:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for i in gpus:
            labels = (
                f'gpu="{i}",UUID="GPU-{uuid.UUID(int=i + 1)}",pci_bus_id="00000000:{BUSES[i % 8].upper()}:00.0",'
                f'device="nvidia{i}",modelName="{MODEL}",hostname="{host.name}",'
                f'DCGM_FI_DRIVER_VERSION="{DRIVER}"'
            )
            value = IDLE.get(name, "0")
            if name == "DCGM_FI_DEV_XID_ERRORS":
                code, message = (XID_CODE, XID_MESSAGE) if xid and i == XID_GPU else (0, "No Error")
                labels += f',err_code="{code}",err_msg="{message}"'
                value = str(code)
            elif name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                value = str(81_234_567_890 + i * 1_000_003)
            out.append(f"{name}{{{labels}}} {value}")
    return "\n".join(out) + "\n"
