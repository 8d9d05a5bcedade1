"""The inter-node NCCL proof can start on a real cluster: the MPIJob launcher's mpirun, as
root, is allowed to run, and every NCCL workload calls all_reduce_perf where the nccl-tests
image has it. Open MPI's own mpirun (Debian's openmpi-bin) judges the rendered command line;
the lab's launcher models the same refusal and the image's layout."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from simulator.nccl import MPIRUN_ROOT_REFUSAL, exec_failure, launcher_failure
from steps.nccl.manifests import MPIRUN_AS_ROOT, diagnostic_job, mpijob, nvlink_job
from tests.conftest import MINIMAL_SITE
from wizard.site import parse_site

SITE = parse_site(MINIMAL_SITE)


def _launcher(job: dict) -> dict:
    return job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def _real_mpirun(argv: list[str], env: dict[str, str], standin: str) -> subprocess.CompletedProcess:
    """The launcher's command line under the real mpirun, with all_reduce_perf replaced by
    a stand-in that prints its arguments and one exported variable, on two local slots."""
    program = next(a for a in argv if a.endswith("/all_reduce_perf"))
    args = [standin if a == program else a for a in argv]
    args[args.index("-np") + 1] = "2"
    args.insert(1, "--oversubscribe")
    return subprocess.run(
        args, env={"PATH": os.environ["PATH"], "HOME": "/root", **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


needs_root_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None or os.geteuid() != 0,
    reason="needs Open MPI's mpirun run as root (.ci/run installs openmpi-bin; CI is root)",
)


@needs_root_mpirun
def test_the_real_mpirun_runs_the_rendered_launcher_as_root_and_refuses_without_the_flag(
    tmp_path,
):
    standin = tmp_path / "all_reduce_perf"
    standin.write_text('#!/bin/sh\necho "ran $* NCCL_IB_HCA=$NCCL_IB_HCA"\n')
    standin.chmod(0o755)
    launcher = _launcher(mpijob(SITE, ["gpu-1", "gpu-2"], 8, "irdma0", qos_on=True))
    env = {e["name"]: e["value"] for e in launcher["env"]}
    ran = _real_mpirun(launcher["command"], env, str(standin))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.count("ran -b 8 -e 16G -f 2 -g 1 NCCL_IB_HCA=irdma0") == 2
    without = [a for a in launcher["command"] if a != MPIRUN_AS_ROOT]
    refused = _real_mpirun(without, env, str(standin))
    assert refused.returncode != 0 and "ran " not in refused.stdout
    assert "mpirun has detected an attempt to run as root" in refused.stdout + refused.stderr
    # The lab's launcher says what the real one says.
    assert MPIRUN_ROOT_REFUSAL.strip() in (refused.stdout + refused.stderr)


def test_the_labs_launcher_refuses_root_like_open_mpi_and_accepts_the_rendered_job():
    launcher = _launcher(mpijob(SITE, ["gpu-1", "gpu-2"], 8, None, qos_on=False))
    env = {e["name"]: e["value"] for e in launcher["env"]}
    assert launcher_failure(launcher["command"], env, uid=0) is None
    without = [a for a in launcher["command"] if a != MPIRUN_AS_ROOT]
    assert launcher_failure(without, env, uid=0) == MPIRUN_ROOT_REFUSAL
    both = {**env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    assert launcher_failure(without, both, uid=0) is None
    assert launcher_failure(without, {**env, "OMPI_ALLOW_RUN_AS_ROOT": "1"}, uid=0)
    assert launcher_failure(without, env, uid=1000) is None


def test_every_nccl_workload_calls_all_reduce_perf_where_the_image_has_it():
    node = SITE.nodes[0]
    launcher = _launcher(mpijob(SITE, ["gpu-1", "gpu-2"], 8, None, qos_on=False))
    assert "/opt/nccl-tests/build/all_reduce_perf" in launcher["command"]
    for job in (nvlink_job(SITE, node), diagnostic_job(SITE, node)):
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert exec_failure(command) is None, command
    # The bare name, as before: not on the image's PATH.
    assert "executable file not found" in exec_failure(["all_reduce_perf", "-b", "8"])
    assert "exec: all_reduce_perf: not found" in exec_failure(
        ["sh", "-c", "x", "sh", "all_reduce_perf"]
    )
    bare = [
        a if not a.endswith("/all_reduce_perf") else "all_reduce_perf" for a in launcher["command"]
    ]
    assert "unable to find the specified executable" in launcher_failure(bare, {}, uid=0)


def test_the_image_directory_is_a_site_setting():
    site = parse_site(
        MINIMAL_SITE + "measurements: {nccl_tests_dir: /workspace/nccl-tests/build/}\n"
    )
    launcher = _launcher(mpijob(site, ["gpu-1", "gpu-2"], 8, None, qos_on=False))
    assert "/workspace/nccl-tests/build/all_reduce_perf" in launcher["command"]
    with pytest.raises(Exception, match="nccl_tests_dir"):
        parse_site(MINIMAL_SITE + "measurements: {nccl_tests_dir: 'build; rm -rf /'}\n")


async def test_without_the_flag_the_proof_fails_with_open_mpis_words(tmp_path, monkeypatch):
    """End to end: the launcher the lab's MPI Operator starts refuses root; the step names
    the cause instead of 'no NCCL INFO lines'."""
    import steps.nccl.manifests as manifests
    from tests.conftest import findings_of
    from tests.test_gpudirect_proof import _two_node_run
    from wizard.model import Severity

    monkeypatch.setattr(manifests, "MPIRUN_AS_ROOT", "--bind-to=none")
    outcome, _ = await _two_node_run(tmp_path)
    nccl = findings_of(outcome, "nccl.all-reduce")
    assert nccl["T11.nccl-path"].severity is Severity.FAIL
    assert "refused to run as root" in nccl["T11.nccl-path"].message
    assert nccl["T12.gdr"].severity is Severity.FAIL


def test_every_nccl_workload_keeps_nccls_own_ib_transport():
    """The nccl-tests image registers HPC-X's nccl_rdma_sharp_plugin (libnccl-net.so) through
    /etc/ld.so.conf.d/hpcx.conf and LD_LIBRARY_PATH (coreweave/nccl-tests Dockerfile), which
    NCCL loads by default instead of its internal IB transport; CoreWeave's own B300 MPIJob
    passes NCCL_NET_PLUGIN=none. So do ours, to every rank (mpirun -x)."""
    job = mpijob(SITE, ["gpu-1", "gpu-2"], 8, "irdma0", qos_on=True)
    launcher = _launcher(job)
    assert {"name": "NCCL_NET_PLUGIN", "value": "none"} in launcher["env"]
    command = " ".join(launcher["command"])
    assert "-x NCCL_NET_PLUGIN" in command, command
    for other in (diagnostic_job(SITE, SITE.nodes[0]), nvlink_job(SITE, SITE.nodes[0])):
        container = other["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "NCCL_NET_PLUGIN", "value": "none"} in container["env"]
