"""The registry pull secret in every namespace that pulls, before anything pulls (#30):
copied from a namespace that has it or made from registry.username_env / password_env,
never written to the export or the journal; a secret that cannot be made refuses the
GPU Operator's release before it is installed."""

from __future__ import annotations

import base64
import io
import json

from frontend.headless import HeadlessFrontEnd
from simulator.existing import LAB_MIRROR_HOST
from simulator.lab import Lab
from steps.nccl.manifests import NAMESPACE as NCCL_NAMESPACE
from steps.pull_secrets import pull_namespaces
from steps.rdma_plugin import TEST_NAMESPACE
from tests.conftest import K8S_PHASES, run_in_lab
from wizard.model import Severity
from wizard.site import load_site

SECRET = "nexus-pull"


def frontend():
    return HeadlessFrontEnd(yes=True, out=io.StringIO())


def failures(outcome):
    return [(f.check, f.message) for _, _, f in outcome.findings if f.severity is Severity.FAIL]


async def test_the_secret_is_copied_into_every_namespace_that_pulls(tmp_path):
    outcome, lab = await run_in_lab(tmp_path, frontend(), phases=K8S_PHASES)
    assert outcome.exit_code == 0, failures(outcome)
    source = lab.cluster.get("v1", "secrets", "default", SECRET)
    site = load_site(lab.site_path)
    assert {"gpu-operator", "kube-system", TEST_NAMESPACE, NCCL_NAMESPACE} <= set(
        pull_namespaces(site, "gpu-operator")
    )
    for ns in pull_namespaces(site, "gpu-operator"):
        secret = lab.cluster.get("v1", "secrets", ns, SECRET)
        assert secret is not None, ns
        assert secret["data"] == source["data"] and secret["type"] == source["type"]
    # No credential in the journal or the checkpoint.
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert (
                "lab-pull-password" not in text and source["data"][".dockerconfigjson"] not in text
            )


async def test_from_the_named_variables_and_never_into_the_state(tmp_path, monkeypatch):
    monkeypatch.setenv("GNW_TEST_REG_USER", "robot-user")
    monkeypatch.setenv("GNW_TEST_REG_PASSWORD", "s3cret-registry-pw")

    def credentials_only(lab: Lab) -> None:
        for ns in ("default", "kube-system"):
            lab.cluster.delete("v1", "secrets", ns, SECRET)
        text = lab.site_path.read_text().replace(
            "pull_secret: nexus-pull",
            "pull_secret: nexus-pull\n  username_env: GNW_TEST_REG_USER\n  password_env: GNW_TEST_REG_PASSWORD",
        )
        assert text != lab.site_path.read_text()
        lab.site_path.write_text(text)

    outcome, lab = await run_in_lab(
        tmp_path, frontend(), phases=K8S_PHASES, prepare=credentials_only
    )
    assert outcome.exit_code == 0, failures(outcome)
    secret = lab.cluster.get("v1", "secrets", "gpu-operator", SECRET)
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert config["auths"][LAB_MIRROR_HOST]["username"] == "robot-user"
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert "s3cret-registry-pw" not in path.read_text(errors="replace"), path


async def test_no_secret_and_no_credentials_refuses_before_anything_pulls(tmp_path):
    def no_secret(lab: Lab) -> None:
        for ns in ("default", "kube-system"):
            lab.cluster.delete("v1", "secrets", ns, SECRET)

    # Greenfield: no release yet, so nothing may pull before the secret exists.
    outcome, lab = await run_in_lab(
        tmp_path, frontend(), "greenfield", phases=K8S_PHASES, prepare=no_secret
    )
    refused = [f for _, _, f in outcome.findings if f.check == "T01.pull-secret"]
    assert refused and refused[0].severity is Severity.FAIL
    assert "gpu-operator" in refused[0].message and "username_env" in refused[0].remediation
    assert not lab.releases  # the GPU Operator was not installed: nothing pulled
