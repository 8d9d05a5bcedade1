"""GPU facts: nvidia-smi -L, the nvidia-smi table, nvidia-smi topo -m (and distances)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean, one_stream

# -- nvidia-smi -L ----------

_GPU_LINE = re.compile(r"^GPU\s+(?P<index>\d+):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>[^)]+)\)\s*$")


@dataclass
class GpuId(Fact):
    index: int
    name: str
    uuid: str


@dataclass
class NvidiaSmiList(Fact):
    gpus: list[GpuId]


@parser("nvidia-smi-l", "nvidia-smi -L")
def parse_nvidia_smi_l(text: str) -> NvidiaSmiList:
    text = clean(text, "nvidia-smi-l")
    gpus = [
        GpuId(int(m["index"]), m["name"], m["uuid"].strip())
        for line in text.splitlines()
        if (m := _GPU_LINE.match(line.strip()))
    ]
    if not gpus:
        raise ParseError("nvidia-smi-l", "no 'GPU N: NAME (UUID: ...)' lines")
    return NvidiaSmiList(gpus)


# -- nvidia-smi (table) ----------

# A row of the table is about 90 characters; a far longer line is not one, and is not
# searched (the row patterns backtrack on long runs of digits or spaces).
MAX_ROW_CHARS = 512
# The column after the name is the persistence mode on Linux (On/Off) and the driver model
# on Windows (WDDM, TCC, MCDM: the header then reads "TCC/WDDM" or "Driver-Model").
_GPU_ROW = re.compile(
    r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off|WDDM|TCC|MCDM|N/A)\s+\|"
    r"\s*(?P<bus>[0-9A-Fa-f:.]+)"
)
_MEMORY_CELL = re.compile(r"^\s*(?P<used>\d{1,12})MiB\s*/\s*(?P<total>\d{1,12})MiB\s*$")
_UTIL_CELL = re.compile(r"^\s*(?P<util>\d{1,3})\s*%")
# The banner's labels: "Driver Version:" / "CUDA Version:" up to the 58x drivers, "KMD
# Version:" / "CUDA UMD Version:" from 610 on (NVIDIA's nvidia-smi documentation: the old
# names are deprecated "to more accurately reflect the source of the version
# information"). The newer name wins where a banner carries both.
_DRIVER_LABELS = ("KMD Version:", "Driver Version:")
_CUDA_LABELS = ("CUDA UMD Version:", "CUDA Version:")
_VERSION_VALUE = re.compile(r"[ \t]*(\d[\d.]{0,31})")
# The GPU table's column header ("| GPU  Name   Persistence-M | Bus-Id ..."; on Windows
# "TCC/WDDM" or "Driver-Model" after the name): a table cut above its banner starts here.
_COLUMN_HEADER = re.compile(r"^\|\s*GPU\s+Name\s")
# The tables after the GPU table: their rows are MIG devices and processes, never GPUs.
_LATER_TABLES = ("MIG devices:", "Processes:")


@dataclass
class GpuStatus(Fact):
    index: int
    name: str
    memory_used_mib: int | None
    memory_total_mib: int | None
    util_percent: int | None
    bus_id: str | None = None


@dataclass
class NvidiaSmi(Fact):
    driver_version: str | None
    cuda_version: str | None
    gpus: list[GpuStatus]


@parser("nvidia-smi", "nvidia-smi")
def parse_nvidia_smi(text: str) -> NvidiaSmi:
    """The banner's versions and one entry per GPU row of the first table.

    A GPU takes two lines: the first has index, name and bus id, the one right after it
    the memory and utilisation cells. Only that line is read for them: a GPU with MIG on
    prints ``N/A`` there and those stay null (the MIG devices table below holds the MIG
    devices' own numbers, not the GPU's).
    """
    lines = one_stream("nvidia-smi", clean(text, "nvidia-smi"), _is_table_line)
    driver, cuda = _versions(lines)
    gpus: list[GpuStatus] = []
    in_table = False
    for number, line in enumerate(lines):
        if len(line) > MAX_ROW_CHARS:
            continue
        if not in_table:  # the GPU table starts at the banner or its column header
            in_table = "NVIDIA-SMI" in line or bool(_COLUMN_HEADER.match(line))
            continue
        if any(title in line for title in _LATER_TABLES):
            break
        row = _GPU_ROW.match(line)
        if not row:
            continue
        gpu = GpuStatus(int(row["index"]), row["name"], None, None, None, row["bus"])
        gpus.append(gpu)
        following = lines[number + 1] if number + 1 < len(lines) else ""
        cells = following.split("|") if len(following) <= MAX_ROW_CHARS else []
        if len(cells) >= 4:
            if memory := _MEMORY_CELL.match(cells[2]):
                gpu.memory_used_mib = int(memory["used"])
                gpu.memory_total_mib = int(memory["total"])
            if util := _UTIL_CELL.match(cells[3]):
                gpu.util_percent = int(util["util"])
    if driver is None and cuda is None and not gpus:
        raise ParseError("nvidia-smi", "no 'NVIDIA-SMI ... Version' banner and no GPU rows")
    return NvidiaSmi(driver_version=driver, cuda_version=cuda, gpus=gpus)


def _is_table_line(line: str) -> bool:
    """A line of nvidia-smi's own table (banner or GPU row), for picking one rank's lines."""
    return len(line) <= MAX_ROW_CHARS and ("NVIDIA-SMI" in line or bool(_GPU_ROW.match(line)))


def _versions(lines: list[str]) -> tuple[str | None, str | None]:
    """Driver and CUDA version from the banner line, the one naming NVIDIA-SMI (``| NVIDIA-SMI 595.91.07  Driver
    Version: 595.91.07  CUDA Version: 13.1 |``; from 610 ``KMD Version:`` and ``CUDA UMD
    Version:``), each label found with str.find: linear in the text whatever it holds (a
    regex with ``.*?`` between the two is quadratic on a long line of repeated labels).
    A value the banner does not print stays null."""
    for line in lines:
        if "NVIDIA-SMI" not in line or "Version:" not in line:
            continue
        driver = _labelled(line, _DRIVER_LABELS)
        cuda = _labelled(line, _CUDA_LABELS)
        if driver or cuda:
            return driver, cuda
    return None, None


def _labelled(line: str, labels: tuple[str, ...]) -> str | None:
    for label in labels:
        at = line.find(label)
        if at >= 0 and (value := _VERSION_VALUE.match(line, at + len(label))):
            return value[1].rstrip(".")
    return None


# -- nvidia-smi topo -m ----------

# Closest first. NCCL uses GPUDirect RDMA by default only up to PXB (NCCL_NET_GDR_LEVEL).
LINK_ORDER = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
_LABEL = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z][a-z0-9_]*\d)$")


def link_rank(link: str) -> int:
    """0 for X (self), then PIX=1 ... SYS=5; NVLink counts as closest after self."""
    if link.startswith("NV"):
        return 1
    try:
        return LINK_ORDER.index(link)
    except ValueError:
        return len(LINK_ORDER)


@dataclass
class NvidiaSmiTopo(Fact):
    devices: list[str]
    matrix: dict[str, dict[str, str]]
    nic_legend: dict[str, str] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)

    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    def nic_label(self, rdma_device: str) -> str | None:
        """The matrix label of an RDMA device (``NIC0`` for ``irdma0`` via the legend)."""
        for label, name in self.nic_legend.items():
            if name == rdma_device:
                return label
        return rdma_device if rdma_device in self.devices else None

    def distance(self, gpu: str, rdma_device: str) -> str | None:
        """The link between ``gpu`` and the NIC named ``rdma_device`` (e.g. ``PXB``)."""
        label = self.nic_label(rdma_device)
        if label is None:
            return None
        return self.matrix.get(gpu, {}).get(label)


# Every link name nvidia-smi topo prints (its Legend), longest first for the split below.
_LINK_NAME = re.compile(r"NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|X")


def _link_cells(cell: str) -> list[str]:
    """One printed cell as the link cells it holds. nvidia-smi itself (B200 with 16 NICs,
    NVIDIA/nccl B200 report) sometimes drops the tab between two cells: "PXBNODE",
    "SYSSYS", " X NODE" are two links; anything that is not made only of link names is
    one cell as printed."""
    words = cell.split()
    cells: list[str] = []
    for word in words:
        parts = _LINK_NAME.findall(word)
        cells.extend(parts if parts and "".join(parts) == word else [word])
    return cells


def _row_cells(line: str, width: int) -> tuple[list[str], list[str]]:
    """(the row's ``width`` link cells, the cells after them). nvidia-smi separates cells
    with tabs and leaves a cell empty when it has nothing to say (no CPU affinity for a
    GPU on another socket's NUMA node): with tabs the empty cells keep their place, so a
    NUMA node is never read as a CPU list. Text whose tabs were turned into spaces is
    split on spaces (an empty cell cannot be seen there)."""
    if "\t" not in line:
        words = line.split()[1:]
        links: list[str] = []
        index = 0
        while index < len(words) and len(links) < width:
            links.extend(_link_cells(words[index]))
            index += 1
        return links, words[index:]
    links, rest = [], []
    for cell in line.split("\t")[1:]:
        if len(links) < width:
            links.extend(_link_cells(cell))
        else:
            rest.append(cell.strip())
    return links[:width], links[width:] + rest


def _is_topo_row(line: str) -> bool:
    """A matrix row of GPU (every topo matrix has one), for picking one rank's lines."""
    return line.startswith("GPU") and line[3:4].isdigit()


@parser("nvidia-smi-topo", "nvidia-smi topo -m")
def parse_nvidia_smi_topo(text: str) -> NvidiaSmiTopo:
    lines = one_stream("nvidia-smi-topo", clean(text, "nvidia-smi-topo"), _is_topo_row)
    text = "\n".join(lines)
    header_index = None
    devices: list[str] = []
    for i, line in enumerate(lines):
        words = line.split()
        labels = []
        for word in words:
            if word == "CPU":
                break
            labels.append(word)
        if labels and line[:1].isspace() and all(_LABEL.match(w) for w in labels):
            header_index, devices = i, labels
            break
    if header_index is None:
        raise ParseError("nvidia-smi-topo", "no header row of GPU/NIC labels")
    matrix: dict[str, dict[str, str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    for line in lines[header_index + 1 :]:
        words = line.split()
        if not words or words[0] not in devices:
            if matrix and not line.strip():
                break
            continue
        label = words[0]
        links, extra = _row_cells(line, len(devices))
        if len(links) < len(devices):
            raise ParseError(
                "nvidia-smi-topo", f"row {label} has {len(links)} of {len(devices)} links"
            )
        matrix[label] = dict(zip(devices, links, strict=True))
        if label.startswith("GPU"):
            if extra and extra[0]:
                cpu[label] = extra[0]
            if len(extra) > 1 and extra[1]:
                numa[label] = extra[1]
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.MULTILINE))
    if not matrix:
        raise ParseError("nvidia-smi-topo", "no matrix rows under the header")
    return NvidiaSmiTopo(devices, matrix, legend, cpu, numa)
