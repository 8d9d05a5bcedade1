"""The GPU-memory perftest measures the GPU nearest the NIC, on the port its server listens
on, from a pinned image: the exported pods and the live run."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest
import yaml

from steps.nccl.steps import FIND_NEAREST_GPU, CudaPerftest, nearest_gpu
from tests.conftest import K8S_PHASES, MINIMAL_SITE, findings_of
from wizard.lab.perf import PerftestArgs, topo_output
from wizard.lab.workloads import visible_gpus
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


def test_the_nearest_gpu_is_pix_then_pxb_never_sys():
    assert nearest_gpu({"GPU0": "SYS", "GPU1": "PXB", "GPU2": "PIX", "GPU3": "PIX"}) == (2, "PIX")
    assert nearest_gpu({"GPU4": "SYS", "GPU5": "PXB"}) == (5, "PXB")
    assert nearest_gpu({"GPU0": "SYS", "GPU1": "NODE"}) is None
    assert nearest_gpu({}) is None


def test_the_device_plugin_gives_one_gpu_as_device_0_and_all_in_pci_order_when_asked():
    """The lab's model of NVIDIA's device plugin and CUDA's device order."""
    assert visible_gpus(8, 1, {}) == [7]  # one GPU: CUDA device 0 is whichever was allocated
    assert visible_gpus(8, 8, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == list(range(8))
    assert visible_gpus(8, 8, {}) != list(range(8))  # FASTEST_FIRST: no order promised


@pytest.mark.skipif(shutil.which("awk") is None, reason="needs awk")
def test_the_pod_script_finds_the_nearest_gpu_in_real_nvidia_smi_output(tmp_path):
    """The exported pod's awk under a real /bin/sh, fed the topology nvidia-smi prints."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (tmp_path / "topo.txt").write_text(topo_output(8))
    (stubs / "nvidia-smi").write_text(f"#!/bin/sh\ncat {tmp_path / 'topo.txt'}\n")
    (stubs / "nvidia-smi").chmod(0o755)
    script = 'dev="$1"; ' + FIND_NEAREST_GPU + 'echo "chose=$gpu"'
    for dev, expected in (("irdma0", "chose=0"), ("irdma1", "chose=0")):
        ran = subprocess.run(["sh", "-c", script, "sh", dev], capture_output=True, text=True,
                             env={"PATH": f"{stubs}:/usr/bin:/bin"})  # fmt: skip
        assert ran.returncode == 0 and expected in ran.stdout, ran.stderr
    ran = subprocess.run(["sh", "-c", script, "sh", "irdma9"], capture_output=True, text=True,
                         env={"PATH": f"{stubs}:/usr/bin:/bin"})  # fmt: skip
    assert ran.returncode == 1 and "no GPU within PXB of irdma9" in ran.stderr
    # A node whose first GPUs are SYS from the NIC: the PXB one is found, not GPU0.
    rows = topo_output(8).splitlines()
    rows[1] = rows[1].replace("PXB", "SYS")  # GPU0's row
    (tmp_path / "topo.txt").write_text("\n".join(rows) + "\n")
    ran = subprocess.run(["sh", "-c", script, "sh", "irdma0"], capture_output=True, text=True,
                         env={"PATH": f"{stubs}:/usr/bin:/bin"})  # fmt: skip
    assert "chose=1" in ran.stdout, ran.stdout + ran.stderr


def test_the_images_are_pinned():
    assert ":latest" not in SITE.measurements.cuda_perftest_image
    for bad in ("docker.io/mellanox/cuda-perftest:latest", "docker.io/mellanox/cuda-perftest",
                "nexus:8443/perftest"):  # fmt: skip
        with pytest.raises(Exception, match="not pinned"):
            parse_site(MINIMAL_SITE + f"measurements: {{cuda_perftest_image: '{bad}'}}\n")
    pinned = "nexus:8443/perftest@sha256:" + "a" * 64
    assert parse_site(MINIMAL_SITE + f"measurements: {{cuda_perftest_image: '{pinned}'}}\n")


async def test_the_live_run_measures_the_gpu_nearest_the_nic(tmp_path):
    from tests.conftest import run_in_lab
    from wizard.headless import HeadlessFrontEnd

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
