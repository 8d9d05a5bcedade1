"""DCGM's view of the new node (issue #30): the node's dcgm-exporter /metrics, read through
the API server's pod proxy and judged under the 4.x default-counters names."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest

from frontend.headless import HeadlessFrontEnd
from simulator.dcgm import exporter_page
from steps.gpu_operator.dcgm import check_dcgm, judge, proxy_path
from tests.conftest import K8S_PHASES, findings_of, run_in_lab
from wizard.facts import ParseError, parse
from wizard.model import Severity
from wizard.probe import Report
from wizard.transports.kube import KubeError

NODE = SimpleNamespace(name="gpu-b300-01", gpu_count=8)
NS = "gpu-operator"  # the release's namespace (the first install's)


def lab_host(*faults: str, gpus: int = 8):
    return SimpleNamespace(name="gpu-b300-01", gpus_present=gpus, faults=set(faults))


def verdicts(text: str) -> dict[str, object]:
    report = Report("T01")
    judge(parse("dcgm-metrics", text), NODE, "nvidia-dcgm-exporter-00000", report, NS)
    return {f.check: f for f in report.findings}


def test_the_lab_page_is_read_under_the_default_counters_names():
    metrics = parse("dcgm-metrics", exporter_page(lab_host()))
    assert [g.index for g in metrics.gpus] == list(range(8))
    assert metrics.driver_version == "595.91.07"
    gpu = metrics.gpus[3]
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000004"
    assert gpu.pci_bus_id == "00000000:5D:00.0" and gpu.model_name == "NVIDIA B300 SXM6 AC"
    # Counters keep the csv's field name (the library would call the samples NAME_total).
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                 "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"):  # fmt: skip
        assert name in gpu.values, name
    assert all(v.severity is Severity.PASS for v in verdicts(exporter_page(lab_host())).values())


def test_a_missing_gpu_is_named():
    found = verdicts(exporter_page(lab_host(gpus=7)))["T01.dcgm.gpus"]
    assert found.severity is Severity.FAIL
    assert "7 of 8 GPUs" in found.message and "missing GPU 7" in found.message


def test_an_xid_error_fails_with_its_code_and_message():
    found = verdicts(exporter_page(lab_host("gpu-xid")))["T01.dcgm.xid"]
    assert found.severity is Severity.FAIL
    assert "GPU 3" in found.message and "XID 79" in found.message
    assert "fallen off the bus" in found.message


def _xid(text: str, gpu: int, code: int, message: str) -> str:
    """The page with GPU ``gpu``'s last XID set as the exporter writes it (err_code/err_msg)."""
    out = []
    for line in text.splitlines():
        if line.startswith("DCGM_FI_DEV_XID_ERRORS{") and f'gpu="{gpu}"' in line:
            line = line.replace('err_code="0"', f'err_code="{code}"')
            line = line.replace('err_msg="No Error"', f'err_msg="{message}"')
            line = line.rsplit(" ", 1)[0] + f" {code}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_gpu_without_temperature_still_has_its_xid_judged():
    """A GPU that fell off the bus may report its XID but no temperature: it is missing
    *and* its XID fails, named in both findings (review #30 4a)."""
    page = "\n".join(
        line for line in exporter_page(lab_host("gpu-xid")).splitlines()
        if not (line.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'gpu="3"' in line)
    )  # fmt: skip
    found = verdicts(page)
    assert found["T01.dcgm.gpus"].severity is Severity.FAIL
    assert "GPU 3 (last XID 79" in found["T01.dcgm.gpus"].message
    assert found["T01.dcgm.xid"].severity is Severity.FAIL
    assert "GPU 3" in found["T01.dcgm.xid"].message and "XID 79" in found["T01.dcgm.xid"].message


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_an_application_xid_warns_and_says_the_value_is_sticky(code):
    """NVIDIA's XID catalogue: these are the application's (RESTART_APP / IGNORE)."""
    found = verdicts(_xid(exporter_page(lab_host()), 2, code, "Graphics Engine Exception"))
    xid = found["T01.dcgm.xid"]
    assert xid.severity is Severity.WARN, xid
    assert f"XID {code}" in xid.message and "GPU 2" in xid.message
    assert "until the exporter restarts" in xid.message


@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 92, 94, 95, 999])
def test_a_hardware_driver_or_unknown_xid_fails(code):
    found = verdicts(_xid(exporter_page(lab_host()), 4, code, "x"))
    xid = found["T01.dcgm.xid"]
    assert xid.severity is Severity.FAIL, xid
    assert f"XID {code}" in xid.message and "analyzing-xid-catalog" in xid.remediation


def test_one_hardware_xid_among_application_ones_fails():
    page = _xid(_xid(exporter_page(lab_host()), 1, 13, "a"), 5, 48, "DBE")
    xid = verdicts(page)["T01.dcgm.xid"]
    assert xid.severity is Severity.FAIL and "GPU 5" in xid.message


def test_xid_zero_reads_no_error():
    # dcgm-exporter 4.x xid_errors.go: index 0 is "No Error" (#437).
    assert 'err_code="0",err_msg="No Error"} 0' in exporter_page(lab_host())


def _set(text: str, metric: str, gpu: int, value: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith(metric + "{") and f'gpu="{gpu}"' in line:
            line = line.rsplit(" ", 1)[0] + " " + value
        out.append(line)
    return "\n".join(out) + "\n"


def test_row_remap_failure_fails_and_link_errors_warn():
    page = exporter_page(lab_host())
    remap = verdicts(_set(page, "DCGM_FI_DEV_ROW_REMAP_FAILURE", 5, "1"))["T01.dcgm.memory"]
    assert remap.severity is Severity.FAIL and "GPU 5" in remap.message
    rows = verdicts(_set(page, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 2, "3"))
    assert rows["T01.dcgm.memory"].severity is Severity.WARN
    replay = verdicts(_set(page, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 1, "12"))["T01.dcgm.links"]
    assert (
        replay.severity is Severity.WARN
        and "GPU 1 DCGM_FI_DEV_PCIE_REPLAY_COUNTER = 12" in replay.message
    )


def test_ecc_dbe_counts_when_the_site_enables_it():
    dbe = (
        "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.\n"
        "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"
        'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="6",UUID="GPU-x",device="nvidia6"} 2\n'
    )
    found = verdicts(exporter_page(lab_host()) + dbe)["T01.dcgm.memory"]
    assert (
        found.severity is Severity.FAIL and "GPU 6 DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in found.message
    )


def test_a_page_without_xid_errors_warns_that_xids_are_not_watched():
    page = "\n".join(
        line for line in exporter_page(lab_host()).splitlines() if "XID_ERRORS" not in line
    )
    assert verdicts(page)["T01.dcgm.xid"].severity is Severity.WARN


@pytest.mark.parametrize(
    "text",
    ['DCGM_FI_DEV_GPU_TEMP{gpu="0"', "x" * 20_000 + " 1", "node_load1 0.5\n", "{{{{ 1"],
)
def test_hostile_or_foreign_pages_only_raise_the_parse_error(text):
    started = time.monotonic()
    with pytest.raises(ParseError):
        parse("dcgm-metrics", text)
    assert time.monotonic() - started < 5


READY = [{"type": "Ready", "status": "True"}]


def exporter_pod(name="nvidia-dcgm-exporter-00000", *, ready=True, deleting=False):
    meta = {"name": name, **({"deletionTimestamp": "2026-12-02T02:00:00Z"} if deleting else {})}
    conditions = READY if ready else [{"type": "Ready", "status": "False"}]
    return {"metadata": meta, "status": {"phase": "Running", "conditions": conditions}}


class FakeKube:
    def __init__(self, error: Exception | None = None, text: str = "", pods=None) -> None:
        self.error, self.text, self.asked = error, text, []
        self.listed = pods if pods is not None else [exporter_pod()]

    async def pods(self, namespace, *, field_selector="", label_selector=""):
        assert label_selector == "app=nvidia-dcgm-exporter"
        assert field_selector == "spec.nodeName=gpu-b300-01"
        return self.listed

    async def pod_proxy(self, namespace, name, port, path, *, what):
        self.asked.append((namespace, name, port, path))
        if self.error:
            raise self.error
        return self.text


async def test_the_exporter_of_this_node_is_read_on_port_9400():
    kube = FakeKube(text=exporter_page(lab_host()))
    report = Report("T01")
    await check_dcgm(kube, NODE, report, NS)
    assert kube.asked == [("gpu-operator", "nvidia-dcgm-exporter-00000", 9400, "metrics")]
    assert proxy_path("p", NS) == "/api/v1/namespaces/gpu-operator/pods/p:9400/proxy/metrics"
    assert {f.severity for f in report.findings} == {Severity.PASS}


async def test_an_exporter_that_does_not_answer_fails_and_a_refused_address_skips():
    down = Report("T01")
    await check_dcgm(
        FakeKube(KubeError("metrics: 503 error trying to reach service", 503)), NODE, down, NS
    )
    (finding,) = down.findings
    assert finding.severity is Severity.FAIL and finding.check == "T01.dcgm.read"
    refused = Report("T01")
    await check_dcgm(
        FakeKube(KubeError("metrics: 400 address not allowed", 400)), NODE, refused, NS
    )
    (finding,) = refused.findings
    assert finding.severity is Severity.SKIP and "port-forward" in finding.message


async def test_no_pods_proxy_permission_skips_naming_the_rule_to_grant():
    """A 403 is the cluster's RBAC, not the node: T01 is not failed for it (review #30 5)."""
    denied = Report("T01")
    forbidden = KubeError(
        'pods "nvidia-dcgm-exporter-00000" is forbidden: User "wizard" cannot get resource '
        '"pods/proxy" in API group "" in the namespace "gpu-operator"',
        403,
    )
    await check_dcgm(FakeKube(forbidden), NODE, denied, NS)
    (finding,) = denied.findings
    assert finding.severity is Severity.SKIP and finding.check == "T01.dcgm.read"
    for words in ('resources: ["pods/proxy"]', 'verbs: ["get"]', "namespace gpu-operator",
                  "port-forward"):  # fmt: skip
        assert words in finding.message, words


async def test_the_lab_xid_fault_is_found_through_the_api_servers_pod_proxy(tmp_path):
    """The whole path on the embedded control plane: the kubernetes client asks the API
    server for pods/<exporter>:9400/proxy/metrics and the lab's exporter answers."""
    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    outcome, _ = await run_in_lab(tmp_path, frontend, "gpu-xid", phases=K8S_PHASES)
    found = findings_of(outcome, "gpu-operator.verify")
    assert found["T01.dcgm.xid"].severity is Severity.FAIL
    assert "XID 79" in found["T01.dcgm.xid"].message
    for check in ("T01.dcgm.gpus", "T01.dcgm.memory", "T01.dcgm.links", "T01.allocatable"):
        assert found[check].severity is Severity.PASS, found[check]


async def test_the_embedded_api_servers_pod_proxy_answers_as_the_real_one(tmp_path):
    """Through the kubernetes client: the exporter's /metrics after the operator's install,
    404 for another path (the exporter's mux), 503 for a pod where nothing listens, and
    404 for a pod that does not exist."""
    from simulator.lab import Lab
    from wizard.transports.kube import KubeClient

    async with Lab(tmp_path / "lab", faults=("greenfield",)) as lab:  # its node joined
        lab.operator.appears("gpu-operator")
        kube = KubeClient(str(lab.directory / "kubeconfig"))
        (pod,) = await kube.pods(
            "gpu-operator",
            label_selector="app=nvidia-dcgm-exporter",
            field_selector="spec.nodeName=gpu-b300-01",
        )
        name = pod["metadata"]["name"]
        page = await kube.pod_proxy("gpu-operator", name, 9400, "metrics", what="metrics")
        assert len(parse("dcgm-metrics", page).gpus) == 8
        with pytest.raises(KubeError) as other_path:
            await kube.pod_proxy("gpu-operator", name, 9400, "healthz", what="x")
        assert other_path.value.status == 404
        with pytest.raises(KubeError) as closed:
            await kube.pod_proxy("gpu-operator", name, 9401, "metrics", what="x")
        assert closed.value.status == 503 and "connection refused" in str(closed.value)
        with pytest.raises(KubeError) as gone:
            await kube.pod_proxy("gpu-operator", "no-such-pod", 9400, "metrics", what="x")
        assert gone.value.status == 404


# The exporter's own sample shapes (dcgm-exporter internal/pkg/rendermetrics/render_metrics.go):
# gpuMetricsFormat with MIG labels (GPU_I_PROFILE, GPU_I_ID) and linkMetricsFormat (nvlink=,
# gpu=, gpu_uuid=, model_name=).
GPU0 = (
    'gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000001",pci_bus_id="00000000:18:00.0",'
    'device="nvidia0",modelName="NVIDIA B300 SXM6 AC",hostname="gpu-b300-01"'
)


def test_a_mig_gpu_keeps_the_largest_of_its_instances_samples():
    """With MIG one sample per GPU instance: the GPU's value is the largest (an XID on the
    first instance is not hidden by a 0 on the next)."""
    page = (
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        f'DCGM_FI_DEV_XID_ERRORS{{{GPU0},GPU_I_PROFILE="1g.23gb",GPU_I_ID="1",err_code="79",'
        'err_msg="GPU has fallen off the bus"} 79\n'
        f'DCGM_FI_DEV_XID_ERRORS{{{GPU0},GPU_I_PROFILE="1g.23gb",GPU_I_ID="2",err_code="0",'
        'err_msg="No Error"} 0\n'
    )
    (gpu,) = parse("dcgm-metrics", page).gpus
    assert gpu.values["DCGM_FI_DEV_XID_ERRORS"] == 79


def test_per_link_samples_are_not_gpu_values():
    """linkMetricsFormat samples (nvlink=) describe a link (or an NVSwitch's), not the GPU:
    they do not become GPU 0's value."""
    link = (
        "# TYPE DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL counter\n"
        'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{nvlink="0",gpu="0",'
        'gpu_uuid="GPU-00000000-0000-0000-0000-000000000001",model_name="NVIDIA B300 SXM6 AC"} 9\n'
    )
    metrics = parse("dcgm-metrics", exporter_page(lab_host()) + link)
    assert "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL" not in metrics.gpus[0].values
    assert verdicts(exporter_page(lab_host()) + link)["T01.dcgm.links"].severity is Severity.PASS


def test_an_nvlink_error_counter_on_a_gpu_warns():
    crc = (
        "# TYPE DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL counter\n"
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{"
        + GPU0.replace('gpu="0"', 'gpu="2"')
        + "} 7\n"
    )
    links = verdicts(exporter_page(lab_host()) + crc)["T01.dcgm.links"]
    assert links.severity is Severity.WARN
    assert "GPU 2 DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 7" in links.message


def test_a_gpu_without_nvlink_bandwidth_warns():
    page = "\n".join(
        line for line in exporter_page(lab_host()).splitlines()
        if not (line.startswith("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{") and 'gpu="6"' in line)
    )  # fmt: skip
    links = verdicts(page)["T01.dcgm.links"]
    assert links.severity is Severity.WARN
    assert "GPU 6" in links.message and "NVLINK_BANDWIDTH_TOTAL" in links.message


async def test_a_terminating_or_unready_exporter_pod_is_not_read(monkeypatch):
    """During a DaemonSet rollout the old pod is still Running with a deletionTimestamp:
    the new, Ready one is read (the wait for a Ready pod is bounded short here: what is
    judged is which pod is read, not how long the read waits)."""
    from steps.gpu_operator import dcgm

    monkeypatch.setattr(dcgm, "ROLLOUT_WAIT_S", 1.0)
    monkeypatch.setattr(dcgm, "ROLLOUT_POLL_S", 0.1)
    pods = [
        exporter_pod("nvidia-dcgm-exporter-old", deleting=True),
        exporter_pod("nvidia-dcgm-exporter-starting", ready=False),
        exporter_pod("nvidia-dcgm-exporter-new"),
    ]
    kube = FakeKube(text=exporter_page(lab_host()), pods=pods)
    await check_dcgm(kube, NODE, Report("T01"), NS)
    assert [name for _, name, _, _ in kube.asked] == ["nvidia-dcgm-exporter-new"]
    alone = FakeKube(pods=pods[:2])
    report = Report("T01")
    await check_dcgm(alone, NODE, report, NS)
    assert not alone.asked and report.findings[0].severity is Severity.FAIL


def test_only_ascii_gpu_indices_are_gpus():
    arabic_three = "\u0663"
    page = exporter_page(lab_host()).replace('gpu="3"', f'gpu="{arabic_three}"')
    assert 3 not in [g.index for g in parse("dcgm-metrics", page).gpus]


def test_a_page_over_four_megabytes_is_refused_at_once():
    page = exporter_page(lab_host())
    big = page + "# HELP x " + "y" * 100 + "\n" * (4 << 20)
    with pytest.raises(ParseError, match="over"):
        parse("dcgm-metrics", big)


async def test_the_read_waits_for_the_exporter_pod_a_rollout_is_replacing(monkeypatch):
    """An upgrade just before rolls the exporter's DaemonSet on the new node too: its old
    pod terminating, the new one not Ready yet. The read waits for the new pod (it said
    "no Running, Ready ... pod", a failure of T01 on the real control plane)."""
    from steps.gpu_operator import dcgm

    monkeypatch.setattr(dcgm, "ROLLOUT_POLL_S", 0.0)

    def pod(name, ready, terminating=False):
        meta = {
            "name": name,
            **({"deletionTimestamp": "2026-12-02T06:00:00Z"} if terminating else {}),
        }
        return {"metadata": meta, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}}  # fmt: skip

    class RollingKube:
        """The API's answers over a rollout: old pod terminating, new not Ready, new Ready."""

        def __init__(self):
            self.answers = [[pod("old", True, terminating=True)], [pod("new", False)],
                            [pod("new", True)]]  # fmt: skip

        async def pods(self, namespace, **_):
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

        async def pod_proxy(self, namespace, name, port, path, what=""):
            return f"page of {name}"

    assert await dcgm.read_metrics(RollingKube(), "gpu-b300-01", NS) == ("new", "page of new")


async def test_without_any_exporter_pod_the_read_answers_at_once():
    from steps.gpu_operator import dcgm

    class NoPods:
        async def pods(self, namespace, **_):
            return []

    name, why = await dcgm.read_metrics(NoPods(), "gpu-b300-01", NS)
    assert name is None and "(0 other)" in why
