"""Brownfield safety of the maintenance drain (issue #24 review): whose cordon it is, and
the pods a drain would lose for good.

- A node someone else cordoned before the wizard's maintenance (spec.unschedulable, no
  cordon of the wizard's) is left cordoned once the change verified, and the run says so;
  the knowledge is in the checkpoint before the first effect, so a kill after the drain and
  a resume still leave it cordoned.
- A pod with no controller (no ownerReference with controller: true) is never evicted
  unasked: kubectl drain refuses it without --force (k8s.io/kubectl pkg/drain/filters.go
  unreplicatedFilter), and nothing recreates it. The step stops before the drain naming
  it, nothing changed; approved by name (--delete-bare-pod), the drain takes it.
- The exported runbook's lines (wizard/drain.py) keep the same rule with the Ansible play's
  mark, run by a real shell against a kubectl that answers as the API server does.

The lab is the embedded control plane; the cluster is seeded through the wizard's own
kube client, as another operator's kubectl would act on it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_engine
from simulator.lab import Lab
from steps import build_plan
from tests.conftest import K8S_PHASES
from tests.test_qos import steps_of
from wizard.checkpoint import load_run, site_state_dir
from wizard.drain import CORDON_MARK, back_in_service, bare_pods, out_of_service
from wizard.engine import DecisionRequired
from wizard.report import checkpoint_report
from wizard.site import load_site
from wizard.status import format_status, load_status
from wizard.transports.kube import KubeClient

NODE = "gpu-b300-01"
BARE = ("default", "scratch-notebook")


class Killed(BaseException):
    """Stands for a kill -9 right after the drain returned: nothing after it runs."""


async def joined(lab: Lab, state) -> None:
    """The node joined and serving (every phase before QoS, and the QoS steps qos.apply
    needs: the switch side and the peers), QoS not applied yet."""
    plan = build_plan()
    yes = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    site = load_site(lab.site_path)
    before_qos = [*steps_of(plan, K8S_PHASES), "qos.switch", "qos.peers"]
    outcome = await run_engine(site, plan, state, yes, only=before_qos)
    assert outcome.exit_code == 0, outcome.summary.stopped


def kube(lab: Lab) -> KubeClient:
    return KubeClient(str(lab.directory / "kubeconfig"))


async def qos(lab: Lab, state, log: io.StringIO, **frontend):
    site = load_site(lab.site_path)
    yes = HeadlessFrontEnd(yes=True, window_open=True, out=log, **frontend)
    return await run_engine(site, build_plan(), state, yes, only=["qos.apply"])


async def test_a_cordon_set_before_the_maintenance_stays_after_a_kill_and_a_resume(
    tmp_path, monkeypatch
):
    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", persist=True) as lab:
        await joined(lab, state)
        site = load_site(lab.site_path)
        await kube(lab).cordon(NODE)  # another operator's cordon (a hardware ticket, say)

        # Killed right after the drain returned: the cordon and the drain happened.
        real_drain = KubeClient.drain

        async def drain_then_killed(self, name, **kwargs):
            await real_drain(self, name, **kwargs)
            raise Killed

        monkeypatch.setattr(KubeClient, "drain", drain_then_killed)
        with pytest.raises(Killed):
            await qos(lab, state, io.StringIO())
        monkeypatch.setattr(KubeClient, "drain", real_drain)
        run = load_run(site_state_dir(state, site))
        inflight = run.record("qos.apply", NODE).maintenance
        assert inflight is not None and inflight.stage == "draining"
        assert inflight.cordoned_before is True  # persisted before the first effect
        assert NODE not in run.cordons  # not the wizard's cordon

        # The resume finishes the change; the node stays as its owner left it.
        log = io.StringIO()
        outcome = await qos(lab, state, log)
        assert outcome.summary.results[("qos.apply", NODE)].value == "done", log.getvalue()
        assert lab.cluster.node(NODE)["spec"].get("unschedulable") is True
        said = log.getvalue()
        assert f"{NODE}: left cordoned: it was cordoned before the wizard's maintenance" in said
        assert "uncordoned by qos.apply" not in said
        record = load_run(site_state_dir(state, site)).record("qos.apply", NODE)
        assert "left cordoned: it was cordoned before the wizard's maintenance" in record.message
        kept = [f for f in record.findings if f.check.endswith(".cordon-kept")]
        assert kept and kept[0].severity.value == "warn"
        assert f"kubectl uncordon {NODE}" in kept[0].remediation
        # Not named as a cordon of the wizard's: status and the report do not offer to lift it.
        report = checkpoint_report(state, site, build_plan())
        assert report["cordoned"] == []
        assert "CORDONED" not in format_status(load_status(state, site, build_plan()))


async def test_a_pod_with_no_controller_stops_the_step_before_the_drain_until_approved_by_name(
    tmp_path,
):
    state = tmp_path / "state"
    ns, name = BARE
    async with Lab(tmp_path / "lab", persist=True) as lab:
        await joined(lab, state)
        await kube(lab).create_pod(ns, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},  # no ownerReferences: a bare pod
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "lab"}]},
        })  # fmt: skip
        lab.cluster.put("v1", "pods", {**lab.cluster.get("v1", "pods", ns, name),
                                       "status": {"phase": "Running"}})  # fmt: skip

        # Headless, the window open and --yes: still no deletion without its name.
        with pytest.raises(DecisionRequired) as caught:
            await qos(lab, state, io.StringIO())
        stopped = str(caught.value)
        assert f"Pods with no controller on {NODE}: {ns}/{name}" in stopped
        assert f"pass --delete-bare-pod {ns}/{name}" in stopped
        assert "Cancel stops qos.apply before the drain" in stopped
        assert lab.cluster.get("v1", "pods", ns, name) is not None
        assert not lab.cluster.node(NODE)["spec"].get("unschedulable")  # not even cordoned
        assert not [r for r in lab.cluster.requests if r[1].endswith("/eviction")]

        # Approved by name: the drain evicts it (deleted for good) and the change is made.
        log = io.StringIO()
        outcome = await qos(lab, state, log, delete_bare_pods={f"{ns}/{name}"})
        assert outcome.summary.results[("qos.apply", NODE)].value == "done", log.getvalue()
        assert lab.cluster.get("v1", "pods", ns, name) is None
        assert not lab.cluster.node(NODE)["spec"].get("unschedulable")  # the wizard's, lifted
        journal = (site_state_dir(state, load_site(lab.site_path)) / "journal.jsonl").read_text()
        approvals = [json.loads(line) for line in journal.splitlines()
                     if "bare-pod-deletion-approved" in line]  # fmt: skip
        assert [a["pod"] for a in approvals] == [f"{ns}/{name}"]
        assert approvals[0]["how"] == f"--delete-bare-pod {ns}/{name}"


async def test_a_refused_bare_pod_is_a_failed_step_that_names_it_and_the_choice(tmp_path):
    """The TUI's Cancel (a SKIP reply): the step fails before the drain, its finding names
    the pod and the two ways on; the node was never cordoned."""
    from wizard.events import Answer, DecisionKind, Reply

    class Cancels(HeadlessFrontEnd):
        async def decide(self, decision):
            if decision.kind is DecisionKind.DELETE_BARE_POD:
                return Reply(Answer.SKIP)
            return await super().decide(decision)

    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", persist=True) as lab:
        await joined(lab, state)
        lab.cluster.put("v1", "pods", {
            "metadata": {"name": "debug", "namespace": "default"},
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "lab"}]},
            "status": {"phase": "Running"},
        })  # fmt: skip
        site = load_site(lab.site_path)
        cancels = Cancels(yes=True, window_open=True, out=io.StringIO())
        outcome = await run_engine(site, build_plan(), state, cancels, only=["qos.apply"])
        assert outcome.summary.results[("qos.apply", NODE)].value == "failed"
        (finding,) = [
            f for f in outcome.summary.findings[("qos.apply", NODE)]
            if f.check.endswith(".bare-pods")
        ]  # fmt: skip
        assert "default/debug declare no controller" in finding.message
        assert "--delete-bare-pod NAMESPACE/NAME" in finding.remediation
        assert lab.cluster.get("v1", "pods", "default", "debug") is not None
        assert not lab.cluster.node(NODE)["spec"].get("unschedulable")
        assert NODE not in load_run(site_state_dir(state, site)).cordons


def test_bare_pods_follow_kubectls_filters():
    """k8s.io/kubectl pkg/drain/filters.go: finished pods and mirror pods are no error; a
    controller is an ownerReference with controller: true (metav1.GetControllerOf)."""

    def pod(name, owners=(), phase="Running", **meta):
        return {"metadata": {"name": name, "namespace": "ns", "ownerReferences": list(owners),
                             **meta}, "status": {"phase": phase}}  # fmt: skip

    rs = {"kind": "ReplicaSet", "name": "web", "controller": True}
    pods = [
        pod("managed", [rs]),
        pod("bare"),
        pod("owned-not-controlled", [{**rs, "controller": False}]),
        pod("done", phase="Succeeded"),
        pod("failed", phase="Failed"),
        pod("static", annotations={"kubernetes.io/config.mirror": "x"}),
        pod("leaving", deletionTimestamp="2026-12-02T00:00:00Z"),
    ]
    assert bare_pods(pods) == ["ns/bare", "ns/owned-not-controlled"]


# A kubectl that answers the runbook's lines as the API server would: the node's
# spec.unschedulable and annotations in a JSON file; `get nodes --field-selector` lists the
# node only when spec.unschedulable matches (pkg/registry/core/node/strategy.go
# NodeToSelectableFields: "true"/"false", false when unset); the jsonpath read of an absent
# annotation prints nothing (kubectl get's AllowMissingKeys).
FAKE_KUBECTL = textwrap.dedent(
    """\
    import json, os, sys
    path = os.environ["NODE_FILE"]
    node = json.load(open(path))
    args = sys.argv[1:]
    with open(os.environ["CALLS"], "a") as calls:
        calls.write(" ".join(args) + "\\n")
    def save():
        json.dump(node, open(path, "w"))
    if args[:2] == ["get", "nodes"]:
        selector = next(a for a in args if a.startswith("--field-selector="))
        terms = dict(t.split("=", 1) for t in selector.split("=", 1)[1].split(","))
        unschedulable = "true" if node.get("unschedulable") else "false"
        if terms["metadata.name"] == node["name"] and terms["spec.unschedulable"] == unschedulable:
            print("node/" + node["name"])
        else:
            print("No resources found", file=sys.stderr)
    elif args[:2] == ["get", "node"]:
        key = args[4].split("annotations.", 1)[1].rstrip("}")
        print(node["annotations"].get(key, ""), end="")
    elif args[0] == "annotate":
        change = args[3]
        if change.endswith("-"):
            node["annotations"].pop(change[:-1], None)
        else:
            key, value = change.split("=", 1)
            node["annotations"][key] = value
        save()
    elif args[0] in ("cordon", "uncordon"):
        node["unschedulable"] = args[0] == "cordon"
        save()
    elif args[0] == "drain":
        node["unschedulable"] = True
        save()
    """
)


def follow(tmp_path, node: dict, lines: list[str]) -> tuple[dict, str]:
    """The lines in one `sh -e`, as the runbook is followed in one terminal."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f"#!{sys.executable}\n{FAKE_KUBECTL}")
    kubectl.chmod(0o755)
    (tmp_path / "node.json").write_text(json.dumps(node))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "NODE_FILE": str(tmp_path / "node.json"), "CALLS": str(tmp_path / "calls")}  # fmt: skip
    done = subprocess.run(["sh", "-ec", "\n".join(lines)], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads((tmp_path / "node.json").read_text()), done.stdout


@pytest.mark.parametrize(
    ("before", "after", "said"),
    [
        # Schedulable before: the procedure's own cordon, lifted, its mark removed.
        ({"unschedulable": False, "annotations": {}}, {"unschedulable": False}, ""),
        # Someone else's cordon: never marked, never lifted, and said so.
        (
            {"unschedulable": True, "annotations": {}},
            {"unschedulable": True},
            f"{NODE} left cordoned: it was cordoned before this maintenance",
        ),
        # A failed run's cordon (the mark is there): the rerun lifts it.
        (
            {"unschedulable": True, "annotations": {CORDON_MARK: "maintenance"}},
            {"unschedulable": False},
            "",
        ),
    ],
)
def test_the_runbooks_lines_lift_only_the_procedures_own_cordon(tmp_path, before, after, said):
    node = {"name": NODE, **before}
    end, out = follow(tmp_path, node, [*out_of_service(NODE), back_in_service(NODE)])
    assert end["unschedulable"] is after["unschedulable"]
    assert CORDON_MARK not in end["annotations"]
    assert out.strip() == said


def test_the_exported_scripts_and_runbook_carry_the_rule(tmp_path):
    """Every exported form of the window reads the cordon first and lifts only its own."""
    from tests.conftest import MINIMAL_SITE
    from wizard.export import RUNBOOK, export

    site_file = tmp_path / "site.yaml"
    site_file.write_text(MINIMAL_SITE)
    out = tmp_path / "export"
    export(load_site(site_file), build_plan(), out)
    runbook = (out / RUNBOOK).read_text()
    node = load_site(site_file).nodes[0].name
    guard = out_of_service(node)[0]
    assert guard in runbook and back_in_service(node) in runbook
    assert f"kubectl uncordon {node}  #" not in runbook  # no unguarded uncordon line
    script = (out / "nodes" / node / "qos" / "apply-qos.sh").read_text()
    assert "spec.unschedulable=false" in script and CORDON_MARK in script
    play = (out / "ansible" / "site.yml").read_text()
    assert "spec.unschedulable" in play and CORDON_MARK in play


async def test_a_cordon_set_while_the_gate_was_open_is_not_lifted(tmp_path, monkeypatch):
    """The read before the gate found the node schedulable; while the window question was
    open, someone else cordoned it (a GPU-fault remediation, another operator). A cordon
    has no owner (kubectl cordon.go sets only spec.unschedulable), so the wizard reads the
    node again right before its own cordon: the cordon is someone else's and stays."""
    from wizard.engine import maintenance

    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", persist=True) as lab:
        await joined(lab, state)
        site = load_site(lab.site_path)
        real_read = maintenance.MaintenanceSequence._before_drain

        async def read_then_cordoned_by_another(self, step, ctx):
            found = await real_read(self, step, ctx)
            await kube(lab).cordon(NODE)  # after the read, before the gate's answer
            return found

        monkeypatch.setattr(
            maintenance.MaintenanceSequence, "_before_drain", read_then_cordoned_by_another
        )
        log = io.StringIO()
        outcome = await qos(lab, state, log)
        assert outcome.summary.results[("qos.apply", NODE)].value == "done", log.getvalue()
        assert lab.cluster.node(NODE)["spec"].get("unschedulable") is True
        said = log.getvalue()
        assert "uncordoned by qos.apply" not in said
        assert f"{NODE}: left cordoned: it was cordoned before the wizard's maintenance" in said
        assert NODE not in load_run(site_state_dir(state, site)).cordons
