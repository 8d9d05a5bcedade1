"""Phase 7, join the cluster with Kubespray (manual), then label and taint (T00)."""

from __future__ import annotations

from steps.common import q
from wizard.artifacts import Artifact, Target, render
from wizard.model import StepKind
from wizard.plan import Phase, Scope, Step
from wizard.site import Node, Site


class KubesprayJoin(Step):
    id = "join.kubespray"
    title = "Join the node with Kubespray scale.yml"
    kind = StepKind.MANUAL
    gates = ("T00",)
    scope = Scope.CLUSTER
    reads = ("nodes", "cluster")
    explain = (
        "The operator adds the node to kube_node in the Kubespray inventory, runs facts.yml "
        "over the whole inventory (one unreachable host blocks scaling), then scale.yml "
        "limited to the new node. The wizard then verifies each node is Ready with the "
        "expected kubelet version and a containerd >= 2.0 runtime."
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
        ]

    def commands(self, site: Site, node: Node | None) -> list[str]:
        limit = ",".join(n.name for n in site.nodes)
        return [
            "ansible-playbook -i inventory/<cluster>/hosts.yaml -b facts.yml",
            f"ansible-playbook -i inventory/<cluster>/hosts.yaml -b scale.yml --limit={q(limit)}",
        ]

    def instructions(self, site: Site, node: Node | None) -> str:
        return (
            "Merge cluster/kubespray/hosts-fragment.yaml into the Kubespray inventory, then "
            "run, from the Kubespray checkout:\n  " + "\n  ".join(self.commands(site, node))
        )


class LabelsAndTaint(Step):
    id = "join.labels"
    title = "Node labels and taint"
    kind = StepKind.APPLY
    gates = ("T00",)
    requires = ("join.kubespray",)
    reads = ("labels", "taint")
    explain = (
        "The node carries the site's labels (accelerator=nvidia-b300 by default) and, when "
        "enabled, the NoSchedule taint. Current vs desired labels/taints are shown first."
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


PHASE = Phase(
    id="join",
    number=7,
    title="Join Kubernetes (Kubespray)",
    summary="Add the node to the existing cluster as a worker; label and taint it.",
    steps=(KubesprayJoin(), LabelsAndTaint()),
)
