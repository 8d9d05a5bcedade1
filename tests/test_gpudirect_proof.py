"""The GPUDirect proof reads the GPU through the driver where the GPU Operator puts it."""

from __future__ import annotations

import io
import shlex

from frontend.headless import HeadlessFrontEnd
from simulator.host import LabHost
from tests.conftest import K8S_PHASES, findings_of, run_in_lab
from wizard.driver_root import DRIVER_ROOT, nvidia_smi_command
from wizard.model import Severity


def gpu_host(driver: bool) -> LabHost:
    host = LabHost(name="gpu-1", role="gpu", mgmt_ip="10.0.0.1", rdma_ip="192.168.50.1")
    host.state.gpu_driver = driver
    return host


def test_the_operator_driver_has_no_nvidia_smi_on_the_host_path():
    host = gpu_host(driver=True)
    assert host.execute("nvidia-smi -L").exit_status == 127
    listed = host.execute(shlex.join(nvidia_smi_command("-L")))
    assert listed.exit_status == 0 and listed.stdout.count("NVIDIA B300") == host.state.gpu_count


def test_without_a_driver_the_command_says_so():
    result = gpu_host(driver=False).execute(shlex.join(nvidia_smi_command("-L")))
    assert result.exit_status == 127 and "nvidia-smi: command not found" in result.stderr


def test_the_command_chroots_into_the_driver_root_when_it_holds_nvidia_smi(tmp_path):
    """The script itself, under a real /bin/sh: a fake driver root with nvidia-smi."""
    import subprocess

    root = tmp_path / "driver"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-smi").chmod(0o755)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "chroot").write_text('#!/bin/sh\necho "chroot $*"\n')
    (stubs / "nvidia-smi").write_text('#!/bin/sh\necho "host nvidia-smi $*"\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin"}
    into_root = subprocess.run(
        nvidia_smi_command("topo", "-m", root=str(root)), env=env, capture_output=True, text=True
    )
    assert into_root.stdout.strip() == f"chroot {root} nvidia-smi topo -m"
    on_host = subprocess.run(
        nvidia_smi_command("-L", root=str(tmp_path / "none")),
        env=env,
        capture_output=True,
        text=True,
    )
    assert on_host.stdout.strip() == "host nvidia-smi -L"
    assert DRIVER_ROOT == "/run/nvidia/driver"


async def test_readiness_reads_the_topology_through_the_driver_root(tmp_path):
    outcome, _ = await run_in_lab(
        tmp_path,
        HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO()),
        phases=(*K8S_PHASES, "gpudirect"),
    )
    topology = findings_of(outcome, "gpudirect.readiness")["T11.topology"]
    assert topology.severity in (Severity.PASS, Severity.WARN), topology.message
    assert "GPU0: PXB" in topology.message


# -- NCCL: what its own log says, read the way NCCL means it ------------------------------


def test_a_warning_of_no_transport_is_the_verdict():
    from wizard.facts import parse

    text = (
        "h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "h:1:1 [0] transport.cc:39 NCCL WARN No transport found for rank 0[18000] -> rank 1[28000]\n"
        "h:1:1 [0] transport.cc:39 NCCL WARN No transport found for rank 0[18000] -> rank 1[28000]\n"
    )
    log = parse("nccl-log", text)
    assert log.no_transport and log.verdict == "no-transport"
    assert log.warnings == ["No transport found for rank 0[18000] -> rank 1[28000]"]
    assert log.bootstrap == {"if": "eth0", "ip": "10.0.0.1"}


def test_the_lab_refuses_the_nic_between_nvlink_gpus_like_nccl():
    """ncclTopoCheckNet: one node, P2P and SHM off, NVLink faster than the E810: no
    transport. P2P on: NVLink channels, no network."""
    from simulator.nccl import single_node_log
    from wizard.facts import parse

    off = parse("nccl-log", single_node_log("n", 8, p2p=False, shm=False, hca="irdma0"))
    assert off.verdict == "no-transport"
    nvlink = parse("nccl-log", single_node_log("n", 8, p2p=True, shm=True, hca=None))
    assert nvlink.verdict == "no-net" and {c.transport for c in nvlink.channels} == {"P2P/CUMEM"}


def test_every_warning_reaches_the_findings():
    from steps.nccl import explain_verdict
    from wizard.facts import parse
    from wizard.probe import Report

    text = (
        "h:1:1 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
        "h:1:1 [0] init.cc:412 NCCL WARN Could not enable P2P between dev 0(=18000) and dev 1(=2a000)\n"
    )
    report = Report("T11")
    explain_verdict(parse("nccl-log", text), {}, "intel-e810", report)
    by_check = {f.check: f for f in report.findings}
    assert "Could not enable P2P" in by_check["T11.nccl-warnings"].message
    assert by_check["T11.nccl-path"].severity is Severity.PASS  # a warning, not a failure


# -- the inter-node run and the pod-based perftest, end to end in the lab ---------------------


async def _two_node_run(tmp_path, *faults):
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from steps import build_plan
    from wizard.site import load_site

    plan = build_plan()
    phases = (*K8S_PHASES, "gpudirect", "nccl")
    only = [s.id for p in plan.phases if p.id in phases for s in p.steps]
    lab = Lab(tmp_path / "lab", faults=faults, nodes=2)
    await lab.start()
    try:
        frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
        outcome = await run_engine(load_site(lab.site_path), plan, tmp_path / "state", frontend,
                                   only=only)  # fmt: skip
    finally:
        await lab.stop()
    return outcome, lab


def leftovers(lab) -> list[str]:
    """The measurement workloads still in the lab's cluster (each run removes its own)."""
    kinds = (("v1", "pods"), ("batch/v1", "jobs"), ("kubeflow.org/v2beta1", "mpijobs"))
    return [
        f"{plural}/{obj['metadata']['name']}"
        for api, plural in kinds
        for obj in lab.cluster.list(api, plural, None)
        if obj["metadata"]["name"].startswith("gnw-") and "rdma-test" not in obj["metadata"]["name"]
    ]


async def test_two_nodes_prove_the_path_through_an_mpijob(tmp_path):
    outcome, lab = await _two_node_run(tmp_path)
    assert leftovers(lab) == []  # the perftest pods, the NVLink Job and the MPIJob are gone
    nccl = findings_of(outcome, "nccl.all-reduce")
    assert nccl["T11.nccl-path"].severity is Severity.PASS
    assert "GPUDirect RDMA (DMA-BUF)" in nccl["T12.gdr"].message
    assert "NVLink on one node" in nccl["T11.nccl-busbw"].message
    from wizard.checkpoint import read_state, site_state_dir
    from wizard.site import load_site

    state = read_state(site_state_dir(tmp_path / "state", load_site(lab.site_path)))
    recorded = state["steps"]["nccl.all-reduce"]["gpu-b300-01"]["measurements"]
    curve = {int(e["labels"]["bytes"]): e["value"] for n, e in recorded.items() if ".busbw." in n}
    assert sorted(curve) == [8, 1048576, 134217728, 1073741824, 17179869184]
    assert curve[17179869184] == 11.6  # one E810 port's worth between two nodes (the lab's)
    created = [p for m, p in lab.cluster.requests if m == "POST" and "/mpijobs" in p]
    assert created, "the proof went through the MPI Operator"
    perftest = findings_of(outcome, "nccl.cuda-perftest")
    assert perftest["T11.gpu-memory-rdma"].severity is Severity.PASS
    assert "in a pod through DMA-BUF" in perftest["T12.dmabuf-perftest"].message


async def test_no_transport_fails_t11_and_t12_with_nccls_words(tmp_path):
    outcome, lab = await _two_node_run(tmp_path, "nccl-no-transport")
    assert leftovers(lab) == []  # a failed run leaves nothing to collide with the next
    nccl = findings_of(outcome, "nccl.all-reduce")
    assert nccl["T11.nccl-path"].severity is Severity.FAIL
    assert "No transport found" in nccl["T11.nccl-path"].message
    assert nccl["T12.gdr"].severity is Severity.FAIL


async def test_without_the_mpi_operator_the_step_says_what_to_install(tmp_path):
    outcome, _ = await _two_node_run(tmp_path, "no-mpi-operator")
    nccl = findings_of(outcome, "nccl.all-reduce")
    assert nccl["T11.nccl-path"].severity is Severity.SKIP
    assert "mpijobs.kubeflow.org" in nccl["T11.nccl-path"].message
    assert "nccl-mpijob.yaml" in nccl["T11.nccl-path"].message


def test_the_mpijob_and_pod_carry_what_rdma_needs():
    from steps.nccl.manifests import cuda_perftest_pod, mpijob
    from tests.conftest import MINIMAL_SITE
    from wizard.site import parse_site

    site = parse_site(
        MINIMAL_SITE + "taint: {enabled: true}\nregistry: {mirror: nexus.local:8443/m}\n"
    )
    job = mpijob(site, ["gpu-1", "gpu-2"], 8, "irdma0", qos_on=True)
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    container = worker["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/e810": 1}
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert worker["tolerations"][0]["key"] == site.taint.key
    assert container["image"].startswith("nexus.local:8443/m/")
    assert job["spec"]["slotsPerWorker"] == 8
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", "16"]
    assert {"name": "NCCL_IB_TC", "value": "96"} in launcher["env"]
    pod = cuda_perftest_pod(site, site.nodes[0], "p", ["ib_write_bw"])
    spec = pod["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/e810": 1}
    assert {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"} in spec["containers"][0]["env"]
    assert spec["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    assert spec["tolerations"][0]["key"] == site.taint.key


async def test_the_lab_pod_without_ipc_lock_cannot_register_memory(tmp_path):
    from simulator.lab import Lab

    lab = Lab(tmp_path / "lab")
    await lab.start()
    await lab.stop()
    host = lab.gpu_hosts()[0]
    container = {"resources": {"limits": {"nvidia.com/gpu": 1, "rdma/e810": 1}}}
    output, ok = lab.workloads.perftest_in_pod(
        host, container, ["ib_write_bw", "--use_cuda=0", "--use_cuda_dmabuf", "10.0.0.1"]
    )
    assert not ok and "Couldn't allocate MR" in output
    container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    del container["resources"]["limits"]["rdma/e810"]
    output, ok = lab.workloads.perftest_in_pod(host, container, ["ib_write_bw", "10.0.0.1"])
    assert not ok and "Did not detect devices" in output


def test_the_exported_pod_script_is_valid_shell(tmp_path):
    import shutil
    import subprocess

    from steps.nccl.steps import FIND_DEVICE_AND_GID

    script = tmp_path / "find.sh"
    script.write_text("#!/bin/sh\n" + FIND_DEVICE_AND_GID + "\n")
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck"):
        checked = subprocess.run(
            ["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout


async def test_a_measurement_without_its_typed_inputs_is_blocked_with_the_reason(tmp_path):
    """No silent default device: without irdma.verify's device and GID index the CUDA
    perftest does not run, and says which result it lacks."""
    from wizard.model import StepState

    outcome, _ = await run_in_lab(
        tmp_path, HeadlessFrontEnd(yes=True, out=io.StringIO()), phases=("nccl",)
    )
    assert outcome.summary.results[("nccl.cuda-perftest", "gpu-b300-01")] is StepState.BLOCKED


def mpijob_problems(job: dict) -> list[str]:
    """kubeflow/mpi-operator's validateMPIJobSpec (pkg/apis/kubeflow/validation): what the
    operator refuses, field by field."""
    spec = job.get("spec", {})
    problems = []
    if job.get("apiVersion") != "kubeflow.org/v2beta1" or job.get("kind") != "MPIJob":
        problems.append("apiVersion/kind")
    if spec.get("slotsPerWorker") is None or spec["slotsPerWorker"] < 0:
        problems.append("slotsPerWorker")
    if spec.get("runPolicy", {}).get("cleanPodPolicy") not in ("None", "Running", "All"):
        problems.append("runPolicy.cleanPodPolicy")
    if not spec.get("sshAuthMountPath"):
        problems.append("sshAuthMountPath")
    if spec.get("mpiImplementation") not in ("OpenMPI", "Intel", "MPICH"):
        problems.append("mpiImplementation")
    replicas = spec.get("mpiReplicaSpecs") or {}
    for role in ("Launcher", "Worker"):
        replica = replicas.get(role)
        if replica is None:
            problems.append(f"{role} missing") if role == "Launcher" else None
            continue
        if replica.get("replicas") is None:
            problems.append(f"{role}.replicas")
        if replica.get("restartPolicy") not in ("Always", "OnFailure", "Never", "ExitCode"):
            problems.append(f"{role}.restartPolicy")
        if not replica.get("template", {}).get("spec", {}).get("containers"):
            problems.append(f"{role}.containers")
    if replicas.get("Launcher", {}).get("replicas") != 1:
        problems.append("Launcher.replicas must be 1")
    return problems


def test_the_exported_mpijobs_pass_the_operators_validation_and_their_pods_kubernetes(tmp_path):
    import kubernetes_validate
    import yaml

    from steps import build_plan
    from tests.conftest import fleet_site
    from wizard.export import export
    from wizard.site import load_site

    path = tmp_path / "site.yaml"
    path.write_text(fleet_site(2) + "taint: {enabled: true}\n")
    out = tmp_path / "out"
    export(load_site(path), build_plan(), out)
    jobs = sorted(out.glob("nodes/*/k8s/nccl-mpijob*.yaml"))
    assert len(jobs) == 4  # the proof and the GDR-level diagnostic, per node
    for path in jobs:
        job = yaml.safe_load(path.read_text())
        assert mpijob_problems(job) == [], path.name
        for role, replica in job["spec"]["mpiReplicaSpecs"].items():
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"x-{role.lower()}"},
                   "spec": replica["template"]["spec"]}  # fmt: skip
            kubernetes_validate.validate(pod, "1.33.0", strict=True)
    for path in out.glob("nodes/*/k8s/*-job.yaml"):
        kubernetes_validate.validate(yaml.safe_load(path.read_text()), "1.33.0", strict=True)
    for path in out.glob("nodes/*/k8s/*perftest-pod.yaml"):
        kubernetes_validate.validate(yaml.safe_load(path.read_text()), "1.33.0", strict=True)


def test_the_mpijobs_images_are_in_the_air_gap_list():
    from steps.mirror import object_images
    from steps.nccl.manifests import mpijob
    from tests.conftest import MINIMAL_SITE
    from wizard.site import parse_site

    site = parse_site(MINIMAL_SITE + "measurements: {nccl_tests_image: example.org/nccl/tests:9}\n")
    assert object_images(mpijob(site, ["a", "b"], 8, None, True), site) == {
        "example.org/nccl/tests:9"
    }
