"""Phase 7, join the cluster with Kubespray (manual), then label and taint (T00)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from steps.common import q
from steps.kubespray import (
    KubesprayError,
    checkout_problems,
    count_tasks,
    merged_group_vars,
    merged_inventory,
    run_playbook,
)
from steps.remote import site_path
from wizard import journal
from wizard.artifacts import Artifact, Target, k8s_object, k8s_yaml, render
from wizard.events import Notice, OutputLine
from wizard.model import Finding, StepKind
from wizard.plan import CLUSTER, Change, Phase, Scope, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.support import support_for
from wizard.transports.kube import CONFLICT_TRIES, KubeError

_RUNTIME = re.compile(r"^containerd://v?(\d+)\.(\d+)\.(\d+)")

KUBESPRAY_VERSION = "v2.29.1"
# Kubespray v2.29.1 has playbooks/facts.yml and no top-level facts.yml (scale.yml is at the
# top and imports playbooks/scale.yml).
FACTS_PLAYBOOK = "playbooks/facts.yml"
SCALE_PLAYBOOK = "scale.yml"
# facts.yml is not read-only as shipped: v2.29.1 playbooks/internal_facts.yml play 1
# "Bootstrap hosts for Ansible" (hosts k8s_cluster:etcd:calico_rr) runs
# `{ role: bootstrap_os, tags: bootstrap_os }` as root on every host: system_packages
# (packages removed/installed), the hostname set to the inventory name, dnf.conf's proxy,
# RHSM registration. The tag is inherited by every task of the role, and play 2 "Gather
# facts" is `tags: always`, so skipping it keeps the fact refresh the limited scale needs
# and writes nothing on the existing nodes.
FACTS_SKIP_TAG = "bootstrap_os"


def playbook_runs(site: Site) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The join's two ansible-playbook runs, (playbook, its arguments after it): the one
    definition of what the wizard runs and what the runbook says."""
    limit = ",".join(n.name for n in site.nodes)
    return (
        (FACTS_PLAYBOOK, ("--skip-tags", FACTS_SKIP_TAG)),
        (SCALE_PLAYBOOK, (f"--limit={limit}",)),
    )


# The container toolkit's drop-in for containerd (nvidia-container-toolkit v1.20.0,
# cmd/nvidia-ctk-installer/container/runtime/containerd/containerd.go DefaultDropInConfig)
# and the imports line it adds to config.toml for it (its config_test.go expects
# `imports = ["<dir>/conf.d/*.toml"]`). Kubespray v2.29.1's containerd config.toml.j2 has no
# imports line; its containerd_extra_args (roles/container-engine/containerd/defaults:
# "Extra config to be put in config.toml literally") lands at the top level of the file.
TOOLKIT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
TOOLKIT_IMPORTS = "/etc/containerd/conf.d/*.toml"
GROUP_VARS_PATH = "cluster/kubespray/group_vars/all/containerd.yml"
INVENTORY_ARTIFACT = "cluster/kubespray/hosts.yaml"
MEMBERSHIP_ARTIFACT = "cluster/kubespray/join"


def _write_atomically(path: Path, content: str) -> None:
    """Replace a file of the operator's inventory: temp file beside it, same mode, rename."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.gnw-tmp")
    tmp.write_text(content)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def evaluate_joined(site: Site, nodes: dict[str, dict[str, Any]], report: Report) -> None:
    """Each GPU node is in the cluster, Ready, on the expected kubelet and containerd >= 2.0."""
    support = support_for(site.versions.gpu_operator)
    minimum = support.containerd_min if support else (2, 0)
    for node in site.nodes:
        obj = nodes.get(node.name)
        if obj is None:
            report.fail(
                f"joined-{node.name}",
                f"{node.name} is not in the cluster",
                f"run {FACTS_PLAYBOOK} and {SCALE_PLAYBOOK} --limit=<node> from the Kubespray checkout "
                "(see cluster/kubespray/ in the export), then verify again",
            )
            continue
        status = obj.get("status", {})
        ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
        info = status.get("nodeInfo", {})
        kubelet = info.get("kubeletVersion", "?")
        runtime = info.get("containerRuntimeVersion", "?")
        if ready.get("status") != "True":
            report.fail(
                f"joined-{node.name}",
                f"{node.name} joined but is not Ready ({ready.get('reason', 'no Ready condition')})",
                "check kubelet on the node: journalctl -u kubelet",
            )
            continue
        wanted = site.cluster.kubernetes_version
        if not kubelet.lstrip("v").startswith(wanted + "."):
            report.warn(
                f"kubelet-{node.name}",
                f"{node.name} runs kubelet {kubelet}, the site expects {wanted}.x",
                "align kube_version in the Kubespray inventory with the cluster",
            )
        match = _RUNTIME.match(runtime)
        if match is None or (int(match.group(1)), int(match.group(2))) < minimum:
            report.fail(
                f"runtime-{node.name}",
                f"{node.name} runs {runtime}: GPU Operator {site.versions.gpu_operator} needs "
                f"containerd >= {minimum[0]}.{minimum[1]}",
                "upgrade containerd on the node (Kubespray containerd_version) before the GPU Operator",
            )
        else:
            report.ok(
                f"joined-{node.name}", f"{node.name} is Ready with kubelet {kubelet} and {runtime}"
            )


class KubesprayJoin(Step):
    id = "join.kubespray"
    title = "Join the node with Kubespray scale.yml"
    kind = StepKind.MANUAL
    gates = ("T00",)
    scope = Scope.CLUSTER
    # Every node's inventory entry (name, SSH address and user, bond address), and what
    # verify compares each node with: the cluster's version, the chart's containerd minimum.
    reads = ("node.name", "node.host", "node.ssh", "node.rdma_ip", "cluster", "versions")
    explain = (
        "The operator adds the node to kube_node in the Kubespray inventory and the "
        "containerd group_vars fragment (it keeps the GPU Operator toolkit's nvidia runtime "
        "drop-in imported across Kubespray runs), runs playbooks/facts.yml over the whole "
        "inventory with its bootstrap play skipped (facts only; one unreachable host blocks "
        "scaling), then scale.yml limited to the new "
        "node. The wizard then verifies each node is Ready with the expected kubelet "
        "version and a containerd >= 2.0 runtime."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        nodes = list(site.nodes)
        return [
            Artifact(
                "cluster/kubespray/hosts-fragment.yaml",
                render("kubespray/hosts-fragment.yaml.j2", nodes=nodes),
                Target.INVENTORY,
                "Kubespray inventory hosts.yaml (merge by hand)",
                "inventory entries for the new GPU node(s), YAML form",
            ),
            Artifact(
                "cluster/kubespray/inventory-fragment.ini",
                render("kubespray/inventory-fragment.ini.j2", nodes=nodes),
                Target.INVENTORY,
                "Kubespray inventory.ini (merge by hand)",
                "inventory entries for the new GPU node(s), INI form",
            ),
            Artifact(
                GROUP_VARS_PATH,
                render(
                    "kubespray/containerd-group-vars.yml.j2",
                    nodes=nodes,
                    kubespray_version=KUBESPRAY_VERSION,
                    drop_in=TOOLKIT_DROP_IN,
                    imports_glob=TOOLKIT_IMPORTS,
                ),
                Target.INVENTORY,
                "Kubespray inventory group_vars/all/containerd.yml (merge by hand)",
                "keeps the container toolkit's nvidia runtime drop-in imported by containerd",
            ),
        ]

    def commands(self, site: Site, node: Node | None) -> list[str]:
        # Kubespray's playbooks run from its checkout (its ansible.cfg): a subshell cds there
        # and back, so the runbook keeps the export folder as its one working directory.
        if site.cluster.kubespray is not None:
            ks = site.cluster.kubespray
            checkout = q(site_path(site, ks.checkout))
            inventory = q(site_path(site, ks.inventory))
        else:
            checkout, inventory = "<kubespray-checkout>", "inventory/<cluster>/hosts.yaml"
        return [
            f"(cd {checkout} && ansible-playbook -i {inventory} -b {playbook} "
            f"{' '.join(q(a) for a in args)})"
            for playbook, args in playbook_runs(site)
        ]

    def instructions(self, site: Site, node: Node | None) -> str:
        if site.cluster.kubespray is not None:
            ks = site.cluster.kubespray
            return (
                f"The wizard runs the join itself from the Kubespray checkout {ks.checkout} "
                f"with the inventory {ks.inventory}: it shows the inventory and group_vars "
                "changes first, then runs:\n  " + "\n  ".join(self.commands(site, node))
            )
        return (
            "Merge cluster/kubespray/hosts-fragment.yaml (from `gpu-node-wizard export`) into "
            f"the Kubespray inventory and {GROUP_VARS_PATH} into its group_vars, then run these "
            f"lines with <kubespray-checkout> your Kubespray {KUBESPRAY_VERSION} checkout and "
            "<cluster> its inventory's folder (inventory/<cluster>/hosts.yaml):\n  "
            + "\n  ".join(self.commands(site, node))
        )

    # -- with cluster.kubespray: the wizard runs the join itself (steps/kubespray.py) --------

    def leased_nodes(self, site: Site) -> tuple[str, ...]:
        # scale.yml --limit changes these nodes (kubeadm join, kubelet): their leases first.
        return tuple(n.name for n in site.nodes)

    def runs_itself(self, site: Site) -> bool:
        return site.cluster.kubespray is not None

    def _paths(self, site: Site) -> tuple[Path, Path, Path]:
        """(checkout, inventory, containerd group_vars) as the site file names them."""
        ks = site.cluster.kubespray
        assert ks is not None
        inventory = site.resolve_path(ks.inventory)
        return (
            site.resolve_path(ks.checkout),
            inventory,
            inventory.parent / "group_vars" / "all" / "containerd.yml",
        )

    async def preconditions(self, ctx: StepContext) -> list[Finding]:
        report = Report("T00")
        checkout, inventory, _ = self._paths(ctx.site)
        problems = checkout_problems(checkout, KUBESPRAY_VERSION, (FACTS_PLAYBOOK, SCALE_PLAYBOOK))
        if not inventory.is_file():
            problems.append(f"the inventory {inventory} does not exist")
        if problems:
            report.fail(
                "kubespray-checkout",
                f"the Kubespray checkout {checkout} cannot run the join: {'; '.join(problems)}",
                f"point cluster.kubespray at a Kubespray {KUBESPRAY_VERSION} checkout and its "
                "inventory, or remove cluster.kubespray and run the join by hand",
            )
        return report.findings

    async def changes(self, ctx: StepContext) -> list[Change]:
        site = ctx.site
        _, inventory, group_vars = self._paths(site)
        try:
            live_inventory = inventory.read_text()
            live_vars = group_vars.read_text() if group_vars.is_file() else None
        except (OSError, UnicodeDecodeError) as exc:
            raise KubesprayError(f"cannot read the Kubespray inventory: {exc}") from None
        imports = f'imports = ["{TOOLKIT_IMPORTS}"]'
        joined = {n["metadata"]["name"] for n in await ctx.services.kube.nodes()}
        membership = "".join(f"{n.name}: in the cluster\n" for n in site.nodes)
        live_membership = "".join(
            f"{n.name}: {'in the cluster' if n.name in joined else 'not joined'}\n"
            for n in site.nodes
        )
        limit = ",".join(n.name for n in site.nodes)
        return [
            Change(
                Artifact(INVENTORY_ARTIFACT, merged_inventory(live_inventory, list(site.nodes)),
                         Target.INVENTORY, str(inventory), "the node(s) in all.hosts and kube_node"),
                live_inventory,
            ),
            Change(
                Artifact(GROUP_VARS_PATH, merged_group_vars(live_vars, imports), Target.INVENTORY,
                         str(group_vars), "containerd_extra_args keeps the toolkit's drop-in imported"),
                live_vars,
            ),
            Change(
                Artifact(MEMBERSHIP_ARTIFACT, membership, Target.DOCUMENT, "the cluster's nodes",
                         f"{FACTS_PLAYBOOK}, then {SCALE_PLAYBOOK} --limit={limit}"),
                live_membership,
                f"runs {FACTS_PLAYBOOK} --skip-tags {FACTS_SKIP_TAG} over the whole inventory "
                "(facts only: Kubespray's bootstrap play, which sets hostnames and packages as "
                f"root, is skipped), then {SCALE_PLAYBOOK} --limit={limit} from the checkout",
            ),
        ]  # fmt: skip

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        """Write the reviewed inventory files, then the two playbooks; a failed or
        unreachable host in a PLAY RECAP stops the join, naming it."""
        checkout, inventory, _ = self._paths(ctx.site)
        for change in changes:
            if change.artifact.target is Target.INVENTORY:
                path = Path(change.artifact.destination)
                intent = journal.begin({"target": "kubespray", "write": str(path)})
                _write_atomically(path, change.artifact.content)
                journal.end(intent, {"written": len(change.artifact.content)})
        for playbook, args in playbook_runs(ctx.site):
            total = await count_tasks(checkout, inventory, playbook, args)
            step = max(1, total // 10) if total else 25

            def progress(
                done: int, name: str, playbook: str = playbook, total: int = total, step: int = step
            ) -> None:
                if done % step == 0 or done == total:
                    of = f"/{total}" if total else ""
                    ctx.emit(Notice(f"{playbook}: task {done}{of} ({name})", CLUSTER))

            lines = ctx.wants_output_lines
            run = await run_playbook(
                checkout, inventory, playbook, args,
                on_line=(lambda line: ctx.emit(OutputLine("ansible", line))) if lines else None,
                on_task=progress,
            )  # fmt: skip
            ctx.journal({"target": "kubespray", "step": self.id, "playbook": playbook,
                                "exit": run.exit_status, "recap": run.recap, "tasks": run.tasks,
                                "output_tail": run.tail})  # fmt: skip
            bad = run.bad_hosts()
            if bad or run.exit_status != 0:
                named = ", ".join(f"{h} {why}" for h, why in sorted(bad.items()))
                raise KubesprayError(
                    f"{playbook} failed (exit {run.exit_status})"
                    + (f": {named}" if named else "")
                    + "; fix the host(s) and run the step again (Kubespray runs twice safely)"
                )

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T00")
        nodes = {n["metadata"]["name"]: n for n in await ctx.services.kube.nodes()}
        evaluate_joined(ctx.site, nodes, report)
        return report.findings


def desired_node_metadata(site: Site) -> dict[str, Any]:
    taints = []
    if site.taint.enabled:
        taints.append(
            {"key": site.taint.key, "value": site.taint.value, "effect": site.taint.effect}
        )
    return {"labels": dict(sorted(site.labels.items())), "taints": taints}


def live_node_metadata(site: Site, node: dict[str, Any]) -> dict[str, Any]:
    """The part of a live node the wizard manages, in the same form as the desired one."""
    labels = node["metadata"].get("labels") or {}
    managed = {k: labels[k] for k in sorted(site.labels) if k in labels}
    taints = [
        {"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]}
        for t in node.get("spec", {}).get("taints") or []
        if t.get("key") == site.taint.key
    ]
    return {"labels": managed, "taints": taints}


class LabelsAndTaint(Step):
    id = "join.labels"
    title = "Node labels and taint"
    kind = StepKind.APPLY
    gates = ("T00",)
    requires = ("join.kubespray",)
    reads = ("labels", "taint")
    explain = (
        "The node carries the site's labels (accelerator=nvidia-b300 by default) and, when "
        "enabled, the NoSchedule taint. Current vs desired labels/taints are shown first; other "
        "labels and taints on the node are left alone."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = q(node.name) if node else "<node>"
        lines = [
            f"kubectl label node {name} {q(f'{k}={v}')} --overwrite" for k, v in site.labels.items()
        ]
        if site.taint.enabled:
            t = site.taint
            lines.append(
                f"kubectl taint node {name} {q(f'{t.key}={t.value}:{t.effect}')} --overwrite"
            )
        return lines

    def _artifact(self, site: Site, node: Node) -> Artifact:
        return k8s_object(
            f"nodes/{node.name}/k8s/node-metadata.yaml",
            desired_node_metadata(site),
            f"Node {node.name} labels and taints",
            "labels and taint the wizard manages on the node",
        )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        return [self._artifact(site, node)] if node else []

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        live = await ctx.services.kube.node(ctx.node.name)
        current = k8s_yaml(live_node_metadata(ctx.site, live)) if live else None
        return [Change(self._artifact(ctx.site, ctx.node), current)]

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        """The labels and the site's taint; the node's other taints kept. spec.taints has
        no patch strategy (a merge patch replaces the whole list), so the patch names the
        resourceVersion it was computed from: a taint another writer added in between
        makes it a 409 Conflict, and the list is read and computed again."""
        assert ctx.node is not None
        kube = ctx.services.kube
        for attempt in range(CONFLICT_TRIES):
            live = await kube.node(ctx.node.name) or {}
            others = [
                t
                for t in live.get("spec", {}).get("taints") or []
                if t.get("key") != ctx.site.taint.key
            ]
            desired = desired_node_metadata(ctx.site)
            metadata: dict[str, Any] = {"labels": desired["labels"]}
            version = (live.get("metadata") or {}).get("resourceVersion")
            if version:
                metadata["resourceVersion"] = version
            patch = {"metadata": metadata, "spec": {"taints": others + desired["taints"]}}
            try:
                await kube.patch_node(ctx.node.name, patch)
                return
            except KubeError as exc:
                if exc.status != 409 or attempt + 1 == CONFLICT_TRIES:
                    raise

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T00")
        live = await ctx.services.kube.node(ctx.node.name)
        if live is None:
            report.fail("labels", f"{ctx.node.name} is not in the cluster", "join it first")
            return report.findings
        if live_node_metadata(ctx.site, live) == desired_node_metadata(ctx.site):
            labels = ", ".join(f"{k}={v}" for k, v in ctx.site.labels.items())
            taint = " and the taint" if ctx.site.taint.enabled else ""
            report.ok("labels", f"{ctx.node.name} has {labels}{taint}")
        else:
            report.fail(
                "labels", f"{ctx.node.name} labels/taints differ from the site", "apply them again"
            )
        return report.findings


PHASE = Phase(
    joins_cluster=True,
    id="join",
    number=7,
    title="Join Kubernetes (Kubespray)",
    summary="Add the node to the existing cluster as a worker; label and taint it.",
    steps=(KubesprayJoin(), LabelsAndTaint()),
)
