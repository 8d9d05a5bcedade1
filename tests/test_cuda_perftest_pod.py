"""The GPU-memory perftest measures the GPU nearest the NIC, on the port its server listens
on, from a pinned image: the exported pods and the live run."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from simulator.perf import PerftestArgs, topo_output
from simulator.workloads import visible_gpus
from steps.nccl.steps import FIND_NEAREST_GPU, CudaPerftest, nearest_gpu
from tests.conftest import FIXTURES, K8S_PHASES, MINIMAL_SITE, findings_of
from wizard.model import Severity
from wizard.site import parse_site

SITE = parse_site(MINIMAL_SITE)


def _server_port(line: str) -> int:
    words = line.split()
    return int(words[words.index("-p") + 1])


def test_the_exported_pods_connect_to_the_port_the_runbook_server_listens_on():
    step = CudaPerftest()
    node = SITE.nodes[0]
    servers = [ln for ln in step.commands(SITE, node) if "ib_write_bw" in ln and "on " in ln]
    assert servers, "the runbook starts a server"
    for artifact in step.artifacts(SITE, node):
        pod = yaml.safe_load(artifact.content)
        argv = pod["spec"]["containers"][0]["command"]
        client = PerftestArgs.parse(argv[4:])  # after sh -c SCRIPT sh
        assert client.port == _server_port(servers[0]), artifact.path
        assert client.server == SITE.aistor.peers[0].rdma_ip


def test_the_nearest_gpu_is_the_lowest_ranked_whatever_its_distance():
    assert nearest_gpu({"GPU0": "SYS", "GPU1": "PXB", "GPU2": "PIX", "GPU3": "PIX"}) == (2, "PIX")
    assert nearest_gpu({"GPU4": "SYS", "GPU5": "PXB"}) == (5, "PXB")
    # An add-in NIC on a CPU root port (the usual HGX case): NODE is the nearest there is.
    assert nearest_gpu({"GPU0": "SYS", "GPU1": "NODE"}) == (1, "NODE")
    assert nearest_gpu({"GPU0": "SYS", "GPU1": "PHB", "GPU2": "NODE"}) == (1, "PHB")
    assert nearest_gpu({"GPU0": "SYS", "GPU1": "SYS"}) == (0, "SYS")
    assert nearest_gpu({"GPU0": "?"}) is None
    assert nearest_gpu({}) is None


REAL_TOPOLOGIES = sorted((FIXTURES / "nvidia-smi-topo").glob("*.txt"))


def _real_topology(path: Path) -> str:
    """The fixture as nvidia-smi prints it (its "# source" lines are the fixture's own)."""
    return "".join(ln for ln in path.read_text().splitlines(True) if not ln.startswith("#"))


@pytest.mark.skipif(not REAL_TOPOLOGIES, reason="needs ../shared/fixtures/nvidia-smi-topo")
@pytest.mark.skipif(shutil.which("awk") is None, reason="needs awk")
@pytest.mark.parametrize("path", REAL_TOPOLOGIES, ids=lambda p: p.name)
def test_the_picker_and_the_pod_awk_agree_on_real_nvidia_smi_output(path, tmp_path):
    """Real boards (NICs NODE/SYS from every GPU): the product's picker, fed the parsed
    topology, and the exported pod's awk under a real /bin/sh choose the same GPU."""
    from wizard.facts import parse

    text = _real_topology(path)
    topo = parse("nvidia-smi-topo", text)
    for nic in topo.nic_legend.values():
        distances = {g: topo.distance(g, nic) or "?" for g in topo.gpus()}
        picked = nearest_gpu(distances)
        assert picked is not None, (nic, distances)
        ran = _run_awk(tmp_path, text, nic)
        assert ran.returncode == 0, ran.stderr
        assert f"chose={picked[0]}" in ran.stdout, (nic, distances, ran.stdout)


def test_the_device_plugin_gives_one_gpu_as_device_0_and_all_in_pci_order_when_asked():
    """The lab's model of NVIDIA's device plugin and CUDA's device order."""
    assert visible_gpus(8, 1, {}) == [7]  # one GPU: CUDA device 0 is whichever was allocated
    assert visible_gpus(8, 8, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == list(range(8))
    assert visible_gpus(8, 8, {}) != list(range(8))  # FASTEST_FIRST: no order promised


def _run_awk(tmp_path: Path, topo: str, dev: str) -> subprocess.CompletedProcess:
    """The exported pod's FIND_NEAREST_GPU under a real /bin/sh, nvidia-smi printing ``topo``."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (tmp_path / "topo.txt").write_text(topo)
    (stubs / "nvidia-smi").write_text(f"#!/bin/sh\ncat {tmp_path / 'topo.txt'}\n")
    (stubs / "nvidia-smi").chmod(0o755)
    script = 'dev="$1"; ' + FIND_NEAREST_GPU + 'echo "chose=$gpu"'
    return subprocess.run(["sh", "-c", script, "sh", dev], capture_output=True, text=True,
                          env={"PATH": f"{stubs}:/usr/bin:/bin"})  # fmt: skip


@pytest.mark.skipif(shutil.which("awk") is None, reason="needs awk")
def test_the_pod_script_finds_the_nearest_gpu_in_the_labs_output(tmp_path):
    for dev in ("irdma0", "irdma1"):
        ran = _run_awk(tmp_path, topo_output(8), dev)
        assert ran.returncode == 0 and "chose=0" in ran.stdout, ran.stderr
    ran = _run_awk(tmp_path, topo_output(8), "irdma9")
    assert ran.returncode == 1 and "irdma9 is not in nvidia-smi topo -m" in ran.stderr
    # A node whose first GPU is SYS from the NIC: the PXB one is found, not GPU0.
    rows = topo_output(8).splitlines()
    rows[1] = rows[1].replace("PXB", "SYS")  # GPU0's row
    ran = _run_awk(tmp_path, "\n".join(rows) + "\n", "irdma0")
    assert "chose=1" in ran.stdout, ran.stdout + ran.stderr
    # Every GPU NODE from the NIC, except GPU5 at PHB: the minimum rank wins, not the first.
    rows = topo_output(8, nic_link="NODE").splitlines()
    rows[6] = rows[6].replace("NODE", "PHB")  # GPU5's row
    ran = _run_awk(tmp_path, "\n".join(rows) + "\n", "irdma0")
    assert "chose=5" in ran.stdout, ran.stdout + ran.stderr


def test_the_images_are_pinned():
    assert ":latest" not in SITE.measurements.cuda_perftest_image
    for bad in ("docker.io/mellanox/cuda-perftest:latest", "docker.io/mellanox/cuda-perftest",
                "nexus:8443/perftest"):  # fmt: skip
        with pytest.raises(Exception, match="not pinned"):
            parse_site(MINIMAL_SITE + f"measurements: {{cuda_perftest_image: '{bad}'}}\n")
    pinned = "nexus:8443/perftest@sha256:" + "a" * 64
    assert parse_site(MINIMAL_SITE + f"measurements: {{cuda_perftest_image: '{pinned}'}}\n")


async def test_the_live_run_measures_the_gpu_nearest_the_nic(tmp_path):
    from frontend.headless import HeadlessFrontEnd
    from tests.conftest import run_in_lab

    outcome, _ = await run_in_lab(
        tmp_path,
        HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO()),
        phases=(*K8S_PHASES, "gpudirect", "nccl"),
    )
    perftest = findings_of(outcome, "nccl.cuda-perftest")
    dmabuf = perftest["T12.dmabuf-perftest"]
    assert "GPU0, PXB from irdma0" in dmabuf.message, dmabuf.message
    # On the GPU nearest the NIC the DMA-BUF run reaches the line (the lab's SYS GPU gives
    # well under half of it).
    assert dmabuf.severity in (Severity.PASS, Severity.WARN)
    gbps = float(dmabuf.message.split("DMA-BUF: ")[1].split(" Gb/s")[0])
    assert gbps > 80, dmabuf.message


async def test_a_nic_node_from_every_gpu_is_measured_and_named_not_refused(tmp_path):
    """The usual HGX B300 layout (an add-in E810 on a CPU root port, NODE from every GPU):
    the proof runs on the nearest GPU there is and warns that NCCL's default GDR level will
    not use it."""
    from frontend.headless import HeadlessFrontEnd
    from tests.conftest import run_in_lab

    outcome, _ = await run_in_lab(
        tmp_path,
        HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO()),
        "nic-on-cpu-root-port",
        phases=(*K8S_PHASES, "gpudirect", "nccl"),
    )
    perftest = findings_of(outcome, "nccl.cuda-perftest")
    distance = perftest["T12.nearest-gpu-distance"]
    assert distance.severity is Severity.WARN, distance.message
    assert "GPU0 at NODE" in distance.message and "NCCL_NET_GDR_LEVEL" in distance.message
    assert perftest["T11.gpu-memory-rdma"].severity is Severity.PASS
    assert "GPU0, NODE from irdma0" in perftest["T12.dmabuf-perftest"].message
    assert perftest["T12.dmabuf-perftest"].severity in (Severity.PASS, Severity.WARN)


async def test_against_a_production_peer_dmabuf_and_peermem_are_said_not_comparable(tmp_path):
    """Both GPU-memory runs carry the same rate limit against a production peer: the
    findings give the capped numbers and say the two paths are not comparable (#30 review)."""
    from frontend.headless import HeadlessFrontEnd
    from tests.conftest import run_in_lab

    def production(lab):
        text = lab.site_path.read_text()
        assert "production: false" in text
        lab.site_path.write_text(text.replace("production: false", "production: true"))

    outcome, _ = await run_in_lab(
        tmp_path,
        HeadlessFrontEnd(
            yes=True, window_open=True, allow_storage_load={"aistor-01"}, out=io.StringIO()
        ),
        phases=(*K8S_PHASES, "gpudirect", "nccl"),
        prepare=production,
    )
    dmabuf = findings_of(outcome, "nccl.cuda-perftest")["T12.dmabuf-perftest"]
    assert "capped at 25 Gb/s" in dmabuf.message and "not comparable" in dmabuf.message, dmabuf
    gbps = float(dmabuf.message.split("DMA-BUF: ")[1].split(" Gb/s")[0])
    assert gbps <= 25, dmabuf.message
