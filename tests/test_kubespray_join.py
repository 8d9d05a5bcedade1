"""The Kubespray side of the join (v2.29.1): the playbooks that exist in that version, the
group_vars fragment that keeps the GPU Operator toolkit's containerd drop-in effective after
every later Kubespray run, and the join run by the wizard from the operator's checkout."""

from __future__ import annotations

import io
import tomllib

import pytest
import yaml

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_engine
from simulator.kubespray import BOOTSTRAP_TAG, JOIN_PATH, bootstrapped_hosts
from simulator.lab import Lab
from steps import build_plan
from steps.join import GROUP_VARS_PATH, TOOLKIT_DROP_IN, KubesprayJoin
from steps.kubespray import KubesprayError, PlaybookRun, merged_inventory, parse_recap
from tests.conftest import REFS, findings_of, run_in_lab, with_nodes
from wizard.events import Notice, OutputLine
from wizard.export import export
from wizard.model import Severity
from wizard.site import load_site, parse_site


def fragment(tmp_path) -> dict:
    out = tmp_path / "out"
    export(parse_site(with_nodes(2)), build_plan(), out)
    return yaml.safe_load((out / GROUP_VARS_PATH).read_text())


def test_group_vars_keep_the_toolkit_drop_in_imported(tmp_path):
    values = fragment(tmp_path)
    assert set(values) == {"containerd_extra_args"}
    # Kubespray v2.29.1's config.toml.j2 writes containerd_extra_args literally after the
    # top-level keys (version, root, state, oom_score) and before the first table, so the
    # value must be TOML that sets top-level keys only: here, imports and nothing else.
    parsed = tomllib.loads("version = 3\n" + values["containerd_extra_args"] + "\n[grpc]\n")
    assert set(parsed) == {"version", "imports", "grpc"}
    (pattern,) = parsed["imports"]
    # containerd imports by glob: the toolkit's drop-in must match it.
    directory, _, name = TOOLKIT_DROP_IN.rpartition("/")
    assert pattern == f"{directory}/*.toml" and name.endswith(".toml")


def test_the_sample_inventory_does_not_already_set_it():
    """The v2.29.1 sample (the file operators start from) leaves containerd_extra_args unset,
    so the fragment adds it rather than fighting a default."""
    path = REFS / "kubespray-v2.29.1-inventory-sample-containerd.yml"
    sample = yaml.safe_load(path.read_text()) if path.exists() else None
    assert not (sample or {}).get("containerd_extra_args")


def test_join_commands_use_the_playbooks_of_kubespray_2_29():
    site = parse_site(with_nodes(2))
    facts, scale = KubesprayJoin().commands(site, None)
    assert " -b playbooks/facts.yml " in facts  # v2.29.1 has no top-level facts.yml
    assert " -b scale.yml --limit=gpu-1,gpu-2)" in scale
    assert facts.startswith("(cd <kubespray-checkout> && ansible-playbook ")
    assert GROUP_VARS_PATH in KubesprayJoin().instructions(site, None)


# -- the join run by the wizard, against the lab's stand-in checkout (real ansible-playbook) --

RECAP = """\
PLAY RECAP *********************************************************************
cp-1                       : ok=2    changed=0    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
gpu-b300-01                : ok=1    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0
gpu-b300-02                : ok=0    changed=0    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0

"""


def test_play_recap_names_failed_and_unreachable_hosts():
    run = PlaybookRun("scale.yml", 2, parse_recap("TASK [x] ***\nok: [cp-1]\n\n" + RECAP))
    assert run.recap["cp-1"] == {"ok": 2, "changed": 0, "unreachable": 0, "failed": 0,
                                 "skipped": 0, "rescued": 0, "ignored": 0}  # fmt: skip
    assert run.bad_hosts() == {"gpu-b300-01": "failed", "gpu-b300-02": "unreachable"}
    assert parse_recap("no recap here\n") == {}


def test_the_inventory_edit_keeps_the_operators_file_and_refuses_ini():
    site = parse_site(with_nodes(2))
    text = "# ours\nall:\n  hosts:\n    cp-1:  # keep me\n      ansible_host: 10.0.0.9\n  children:\n    kube_node:\n      hosts:\n        cp-1:\n"
    merged = merged_inventory(text, list(site.nodes))
    assert "# ours" in merged and "# keep me" in merged
    data = yaml.safe_load(merged)
    assert data["all"]["hosts"]["gpu-2"] == {"ansible_host": "10.0.0.2", "ip": "192.168.50.2"}
    assert set(data["all"]["children"]["kube_node"]["hosts"]) == {"cp-1", "gpu-1", "gpu-2"}
    assert merged_inventory(merged, list(site.nodes)) == merged  # nothing left to add
    with pytest.raises(KubesprayError, match=r"hosts\.yaml inventory; with an INI one"):
        merged_inventory("[kube_node]\nnode1\n", list(site.nodes))


class JoinReviewer(HeadlessFrontEnd):
    """Headless --yes --verbose (output lines wanted), recording the join's review."""

    def __init__(self) -> None:
        super().__init__(yes=True, verbose=True, out=io.StringIO())
        self.reviews = []

    async def decide(self, decision):
        if decision.step == "join.kubespray":
            self.reviews.append(decision)
        return await super().decide(decision)


async def test_the_wizard_runs_the_join_with_the_checkout(tmp_path):
    frontend = JoinReviewer()
    outcome, lab = await run_in_lab(tmp_path, frontend, "not-joined", phases=("join",))
    (review,) = frontend.reviews
    diffs = {d.path: d for d in review.diffs}
    inventory = diffs["cluster/kubespray/hosts.yaml"].diff
    assert (
        "+    gpu-b300-01:" in inventory and "+        gpu-b300-01:" in inventory
    )  # host, kube_node
    bond1_ip = lab.hosts["gpu-b300-01"].state.rdma_ip
    assert f"+      ip: {bond1_ip}" in inventory  # its address on bond1
    assert "containerd_extra_args" in diffs[GROUP_VARS_PATH].diff
    assert (
        "runs playbooks/facts.yml --skip-tags bootstrap_os over the whole inventory"
        in review.summary
    )
    assert "then scale.yml --limit=gpu-b300-01 from the checkout" in review.summary
    assert lab.cluster.node("gpu-b300-01") is not None  # scale.yml registered it
    assert (
        findings_of(outcome, "join.kubespray")["T00.joined-gpu-b300-01"].severity is Severity.PASS
    )
    written = lab.kubespray_inventory.read_text()
    assert written.startswith("# the lab cluster's Kubespray inventory")  # the comment stayed
    assert "gpu-b300-01" in yaml.safe_load(written)["all"]["children"]["kube_node"]["hosts"]
    progress = [e.message for e in frontend.events if isinstance(e, Notice) and "task" in e.message]
    assert progress[-1].startswith("scale.yml: task 2/2"), progress
    lines = [e.line for e in frontend.events if isinstance(e, OutputLine) and e.target == "ansible"]
    assert any(line.startswith("PLAY RECAP") for line in lines)  # the real output, streamed


async def test_the_facts_refresh_runs_no_bootstrap_on_any_host(tmp_path):
    """Kubespray's playbooks/facts.yml starts with the bootstrap_os role (hostname, packages,
    dnf.conf, RHSM as root) on every host of the inventory; the wizard's facts refresh skips
    that tag, so no existing node (and not the new one either: scale.yml bootstraps it) is
    written by it. The lab's stand-in writes /etc/hostname on every host its bootstrap play
    runs on."""
    frontend = JoinReviewer()
    _, lab = await run_in_lab(tmp_path, frontend, "not-joined", phases=("join",))
    assert lab.cluster.node("gpu-b300-01") is not None  # the join ran
    assert bootstrapped_hosts(lab.directory / "kubespray") == {}
    (review,) = frontend.reviews
    assert f"--skip-tags {BOOTSTRAP_TAG}" in review.summary
    assert "other nodes are only read" not in review.summary


def test_the_runbook_facts_line_skips_the_bootstrap_play():
    facts, _ = KubesprayJoin().commands(parse_site(with_nodes(2)), None)
    assert facts.endswith(f" -b playbooks/facts.yml --skip-tags {BOOTSTRAP_TAG})")


async def test_a_second_run_changes_nothing_and_runs_no_playbook(tmp_path):
    lab = Lab(tmp_path / "lab", faults=("not-joined",))
    await lab.start()
    try:
        plan = build_plan()
        only = [s.id for s in plan.phase("join").steps]
        await run_engine(load_site(lab.site_path), plan, tmp_path / "s1", JoinReviewer(), only=only)
        frontend = JoinReviewer()
        await run_engine(load_site(lab.site_path), plan, tmp_path / "s2", frontend, only=only)
    finally:
        await lab.stop()
    assert frontend.reviews == []
    assert not [e for e in frontend.events if isinstance(e, OutputLine) and e.target == "ansible"]
    assert "join.kubespray: already in place, nothing to change" in [
        getattr(e, "message", "") for e in frontend.events
    ]


async def test_a_failed_join_names_the_host_from_the_play_recap(tmp_path):
    def refuse(lab: Lab) -> None:
        lab.api.add_lab_handler(
            "POST", JOIN_PATH, lambda body: (500, {"message": "kubeadm join failed"})
        )

    outcome, lab = await run_in_lab(
        tmp_path, JoinReviewer(), "not-joined", phases=("join",), prepare=refuse
    )
    (finding,) = findings_of(outcome, "join.kubespray").values()
    assert finding.severity is Severity.FAIL
    assert "scale.yml failed (exit 2): gpu-b300-01 failed" in finding.message
    assert lab.cluster.node("gpu-b300-01") is None


async def test_a_checkout_of_another_version_is_refused(tmp_path):
    def older(lab: Lab) -> None:
        galaxy = lab.directory / "kubespray" / "galaxy.yml"
        galaxy.write_text(galaxy.read_text().replace("2.29.1", "2.28.0"))

    frontend = JoinReviewer()
    outcome, _ = await run_in_lab(tmp_path, frontend, "not-joined", phases=("join",), prepare=older)
    refusal = findings_of(outcome, "join.kubespray")["T00.kubespray-checkout"]
    assert refusal.severity is Severity.FAIL and "Kubespray 2.28.0" in refusal.message
    assert frontend.reviews == []


async def test_the_join_takes_the_lease_of_every_node_it_limits_to(tmp_path):
    """join.kubespray is cluster-scoped but scale.yml changes the --limit nodes: another
    wizard holding one of their leases refuses the join before any playbook runs."""
    from wizard.engine.leases import NodeLeases
    from wizard.services import build_services

    lab = Lab(tmp_path / "lab", faults=("not-joined",))
    await lab.start()
    try:
        site = load_site(lab.site_path)
        services = build_services(site)
        other = NodeLeases(services, "lab", duration_s=60)
        other.host, other.identity = "jump-2", "gpu-node-wizard bob@jump-2 pid 4242 site lab"
        await other.acquire("gpu-b300-01")
        try:
            plan = build_plan()
            only = [s.id for s in plan.phase("join").steps]
            frontend = JoinReviewer()
            outcome = await run_engine(site, plan, tmp_path / "state", frontend, only=only)
        finally:
            await other.release_all()
            await services.close()
    finally:
        await lab.stop()
    (finding,) = findings_of(outcome, "join.kubespray").values()
    assert finding.severity is Severity.FAIL
    assert "gpu-b300-01 is being changed by another wizard" in finding.message, finding.message
    assert "bob@jump-2" in finding.message
    assert lab.cluster.node("gpu-b300-01") is None, "scale.yml ran under the other wizard"
    assert not [e for e in frontend.events if isinstance(e, OutputLine) and e.target == "ansible"]
