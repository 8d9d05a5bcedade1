"""The GPU Operator release: safe by default on a cluster that already runs it.

The step reads the release state first (``steps.gpu_operator.release``). Installed and
healthy at the pinned version with values that already hold what the wizard needs: no
change at all, the verification checks that the operator covers the new node. Otherwise
the review shows the merged values (live user values + the wizard's) against the live ones,
with the blast radius spelled out, and nothing happens without the operator's confirmation.
"""

from __future__ import annotations

import json
import shlex
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import yaml

from steps.common import KUBECONFIG_WORD, NAMESPACE_WORD, RELEASE_WORD, shown
from steps.gpu_operator.release import (
    ReleaseState,
    blast_radius,
    changed_keys,
    covers,
    merge_values,
    read_state,
    restarted_pod_refs,
)
from steps.gpu_operator.runbook import lists_check
from steps.gpu_operator.values import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUES_PATH,
    build_values,
    driver_pin_note,
    nvidia_driver_resource,
    site_toleration,
    values_yaml,
)
from steps.remote import site_path
from wizard.approvals import ClusterChange, ClusterEffect
from wizard.artifacts import Artifact, Target, k8s_object, k8s_yaml, render
from wizard.events import Notice
from wizard.model import Finding, StepKind
from wizard.plan import Change, Scope, Step, StepContext
from wizard.probe import Report
from wizard.result_keys import ResultKey
from wizard.site import Node, Site
from wizard.transports.helm import HelmError, get_values_args, helm_argv

NVIDIADRIVERS = "/apis/nvidia.com/v1alpha1/nvidiadrivers"
NVIDIADRIVER_PATH = "cluster/k8s/nvidiadriver.yaml"


# The wizard's own upgrade: the release's values become exactly the reviewed file (which
# holds every live user value, merged), never a mix with values helm would reuse unseen
# (helm upgrade --help: "reset the values to the ones built into the chart").
RESET_VALUES = "--reset-values"
# The runbook's upgrade, whose file holds only the wizard's keys: helm merges it over the
# release's last values (steps/gpu_operator/runbook.py).
RESET_THEN_REUSE_VALUES = "--reset-then-reuse-values"


def upgrade_args(
    site: Site,
    values_file: str,
    release: str,
    namespace: str,
    values_from: str = RESET_VALUES,
) -> list[str]:
    """``helm upgrade --install`` of the pinned chart with the reviewed values into the
    release ``namespace``/``release`` (the live one's, else the first install's), waiting;
    ``values_from`` says what else helm takes (RESET_VALUES or RESET_THEN_REUSE_VALUES)."""
    return [
        "upgrade",
        "--install",
        release,
        site.registry.gpu_operator_chart,
        "--namespace",
        namespace,
        "--create-namespace",
        "--version",
        site.versions.gpu_operator,
        "--values",
        values_file,
        values_from,
        "--wait",
        "--timeout",
        "20m",
    ]


def helm_line(site: Site, *args: str, note: str = "from the jump host") -> str:
    """A helm command as the runbook shows it: the site's helm binary (a path resolved as the
    wizard resolves it, relative to the site file) and the kubeconfig the runbook's opening
    block exports."""
    c = site.cluster
    helm = c.helm if "/" not in c.helm else site_path(site, c.helm)
    return shown(helm_argv(helm, KUBECONFIG_WORD, c.context, *args), note)


def values_document(
    version: str | None, status: str | None, values: dict[str, Any], note: str = ""
) -> str:
    """One side of the review's diff: the chart version and state, a note (the blast
    radius, on the desired side of a change: every front end shows the diff in full), then
    the values."""
    head = f"# chart {CHART} {version or '(none)'}, release {status or 'not installed'}\n"
    wrapped = (
        textwrap.wrap(note, 92, break_on_hyphens=False, break_long_words=False) if note else []
    )
    return (
        head + "".join(f"# {line}\n" for line in wrapped) + yaml.safe_dump(values, sort_keys=True)
    )


def tolerates(tolerations: list[dict[str, Any]] | None, taint: dict[str, str]) -> bool:
    """Kubernetes' rule (k8s.io/api core/v1 toleration.go, ``ToleratesTaint``): an empty
    effect matches every effect, an empty key every key; ``Exists`` ignores the value and
    ``Equal`` (the default) needs the same value."""
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        operator = t.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and t.get("value", "") == taint["value"]):
            return True
    return False


# Whether the cluster has the Prometheus Operator's ServiceMonitor CRD, as
# gpu-operator.preflight (steps/gpu_operator/phase.py) read it: the install's values turn
# dcgm-exporter's ServiceMonitor on with it (without the CRD the chart's object fails).
PROMETHEUS_CRDS = ResultKey(
    "gpu-operator.preflight", "prometheus_crds", bool, "the ServiceMonitor CRD exists"
)


class InstallGpuOperator(Step):
    id = "gpu-operator.install"
    title = "GPU Operator release"
    kind = StepKind.APPLY
    gates = ("T01",)
    scope = Scope.CLUSTER
    # The pull secret first: nothing the release deploys may pull before it exists.
    requires = ("gpu-operator.preflight", "registry.pull-secrets")
    needs = (PROMETHEUS_CRDS,)  # the values' dcgm-exporter ServiceMonitor follows it
    reads = ("versions", "registry", "cluster", "taint", "labels", "node.name")
    explain = (
        "The release state is read first (helm list -A, the chart version, helm get values, "
        "the ClusterPolicy and NVIDIADriver resources). Already installed and healthy at the "
        "pinned version with the values the site needs: nothing changes, the step verifies "
        "that the operator covers the new node. Otherwise the review shows the merged values "
        "(every live user value kept) and the blast radius: any change of the running "
        "release re-renders the operands' DaemonSets, and their pods restart on every GPU "
        "node (the review names each pod on an existing node, from the live pods). Such a "
        "change outside the new nodes is made only once approved by name: typed "
        "gpu-operator-upgrade in the TUI, --allow-cluster-change gpu-operator-upgrade "
        "headless (never --yes alone); the report lists it, who approved it and when, and "
        "the pods that restarted. driver.kernelModuleType stays the chart's auto (B300 "
        "resolves to open), driver.rdma.enabled false (legacy peermem), the bundled NFD is "
        "the only NFD, and every image comes from the site's mirror with its pull secret."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        files = [
            Artifact(
                VALUES_PATH,
                render(
                    "helm/gpu-operator-values.yaml.j2",
                    site=site,
                    values=values_yaml(site, prometheus_crds=False),
                    dry_run=True,
                ),
                Target.HELM_VALUES,
                "helm release $GNW_RELEASE in $GNW_NAMESPACE (the runbook finds them; none: "
                f"{NAMESPACE}/{RELEASE})",
                "GPU Operator chart values (the RUNBOOK upgrades the live release with them, keeping its values)",
            )
        ]
        if site.versions.nvidia_driver_crd:
            files.append(self._driver_artifact(site))
        return files

    def _driver_artifact(self, site: Site) -> Artifact:
        return k8s_object(
            NVIDIADRIVER_PATH,
            nvidia_driver_resource(site),
            "NVIDIADriver (cluster scope)",
            "the driver for the GPU nodes, managed by the NVIDIADriver CRD",
        )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        upgrade = upgrade_args(
            site, VALUES_PATH, RELEASE_WORD, NAMESPACE_WORD, RESET_THEN_REUSE_VALUES
        )
        values = build_values(site, prometheus_crds=False)  # the exported file's
        # $GNW_RELEASE and $GNW_NAMESPACE: gpu-operator.preflight's line found them.
        return [
            f"{helm_line(site, *get_values_args(RELEASE_WORD, NAMESPACE_WORD), note='')} "
            f"2>/dev/null | {lists_check(values)}  # from the jump host; stops when the file "
            "would replace a live list (helm replaces lists, never merges them)",
            helm_line(site, *upgrade)
            + "; the chart's defaults, then the release's last values, then the file "
            "(helm >= 3.14; every other user value stays)",
        ]

    def _wanted(self, ctx: StepContext) -> dict[str, Any]:
        return build_values(ctx.site, prometheus_crds=ctx.need(PROMETHEUS_CRDS))

    async def preconditions(self, ctx: StepContext) -> list[Finding]:
        report = Report("T01")
        state = await read_state(ctx)
        if state.others:
            report.fail(
                "release",
                f"more than one release of the GPU Operator chart: {state.label}, "
                f"{', '.join(state.others)}; two operators fight over every GPU node",
                "uninstall all but one (helm uninstall), then run this step again",
            )
        elif not state.installed and state.cluster_policies:
            names = ", ".join(p["metadata"]["name"] for p in state.cluster_policies)
            report.fail(
                "release",
                f"a ClusterPolicy ({names}) exists without a Helm release of the chart: the "
                "GPU Operator was installed another way (OLM, manifests)",
                "manage it where it was installed; the wizard will not install a second one",
            )
        elif state.status and state.status.startswith("pending"):
            interrupted = interrupted_helm(ctx, state)
            if interrupted:
                report.warn(
                    "release",
                    f"release {state.label} is {state.status}: this wizard's own `{interrupted}` "
                    "was interrupted (the journal has its intent and no outcome; no other wizard "
                    f"holds this site's lock); it is resolved first: {_resolution(state)}",
                    "nothing to do: the step resolves it, then upgrades",
                )
            else:
                report.fail(
                    "release",
                    f"release {state.label} is {state.status}: another helm operation is running "
                    "or was interrupted",
                    f"wait for it, or `helm rollback {state.name} -n {state.namespace}`, then retry",
                )
        return report.findings

    async def changes(self, ctx: StepContext) -> list[Change]:
        state = await read_state(ctx)
        ctx.data["release"] = state.as_data()
        wanted = self._wanted(ctx)
        merged = merge_values(state.user_values, wanted) if state.installed else wanted
        pinned = ctx.site.versions.gpu_operator
        live = (
            values_document(state.chart_version, state.status, state.user_values)
            if state.installed
            else None
        )
        note = " ".join(filter(None, (blast_radius(state, ctx.site, merged),
                                       driver_pin_note(ctx.site, merged))))  # fmt: skip
        document = values_document(pinned, "deployed", merged)
        if document != live:
            document = values_document(pinned, "deployed", merged, note)
        desired = Artifact(
            VALUES_PATH,
            document,
            Target.HELM_VALUES,
            f"helm release {state.label}",
            "GPU Operator chart values: the live user values with the wizard's merged in",
        )
        effect = ClusterEffect(
            ClusterChange.GPU_OPERATOR_INSTALL,
            f"installs GPU Operator {pinned} as {state.label} for the whole cluster: its CRDs "
            "and ClusterPolicy, the NFD worker on every node (it labels every node with its "
            f"PCI and kernel features), the operands on every GPU node ({', '.join(state.gpu_nodes)})",
        )
        # A release that was never deployed (pending-install: a first install interrupted)
        # is still a first install: the step uninstalls it and installs again.
        if state.installed and state.status != "pending-install":
            # A change of the running release is cluster-wide: the ClusterPolicy and the
            # operand DaemonSets are the existing GPU nodes' too (the NFD worker's every
            # node's). It needs its own approval by name (wizard/approvals.py).
            keys = changed_keys(state.user_values, merged)
            what = [
                f"chart {state.chart_version} -> {pinned}"
                if state.chart_version != pinned
                else f"chart {pinned} kept"
            ]
            if keys:
                more = f" and {len(keys) - 8} more" if len(keys) > 8 else ""
                what.append(f"values {', '.join(keys[:8])}{more}")
            effect = ClusterEffect(
                ClusterChange.GPU_OPERATOR_UPGRADE,
                f"changes the GPU Operator release {state.label} that every GPU node runs "
                f"from ({'; '.join(what)})",
                restarted_pod_refs(state, ctx.site, merged),
            )
        changes = [Change(desired, live, note, effect)]
        if ctx.site.versions.nvidia_driver_crd:
            changes.append(self._driver_change(ctx.site, state))
        return changes

    def _driver_change(self, site: Site, state: ReleaseState) -> Change:
        """The wizard's NVIDIADriver against the live one, reduced to the keys it sets."""
        artifact = self._driver_artifact(site)
        desired = nvidia_driver_resource(site)
        name = desired["metadata"]["name"]
        live = next((d for d in state.nvidia_drivers if d["metadata"]["name"] == name), None)
        current = None
        if live is not None:
            spec = live.get("spec") or {}
            current = k8s_yaml(
                {
                    "apiVersion": live.get("apiVersion"),
                    "kind": live.get("kind"),
                    "metadata": {"name": name},
                    "spec": {k: spec[k] for k in desired["spec"] if k in spec},
                }
            )
        labels = ", ".join(f"{k}={v}" for k, v in site.labels.items())
        return Change(artifact, current, f"the NVIDIADriver selects only nodes with {labels}")

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        state = await read_state(ctx)
        if state.status and state.status.startswith("pending") and interrupted_helm(ctx, state):
            await self._resolve_pending(ctx, state)
            state = await read_state(ctx)
        for change in changes:
            if change.artifact.path == VALUES_PATH:
                await self._upgrade(ctx, state, change.artifact.content)
        for change in changes:
            if change.artifact.path == NVIDIADRIVER_PATH:
                body = yaml.safe_load(change.artifact.content)
                await ctx.services.kube.apply(NVIDIADRIVERS, body)

    async def _resolve_pending(self, ctx: StepContext, state: ReleaseState) -> None:
        """The release this wizard left pending when it was killed mid-upgrade: back to the
        newest revision that was deployed (helm rollback with that revision named: without
        one, helm rolls back to current-1, pkg/action/rollback.go, which may be a failed
        revision), or, when nothing was ever deployed (pending-install), uninstalled so
        that the install runs again; never a --force."""
        helm = ctx.services.helm
        ns = ["--namespace", state.namespace]
        if state.status == "pending-install":
            args = ["uninstall", state.name, *ns, "--wait"]
        else:
            listed = await helm.run("history", state.name, *ns, "-o", "json")
            revision = last_deployed_revision(listed.stdout) if listed.exit_status == 0 else None
            if revision is None:
                why = (
                    f"helm history failed: {listed.stderr.strip()[:300]}"
                    if listed.exit_status != 0
                    else "its history holds no deployed or superseded revision"
                )
                raise HelmError(
                    f"release {state.label} is {state.status} after this wizard's interrupted "
                    f"`{interrupted_helm(ctx, state)}`, and there is no revision to roll back "
                    f"to ({why}); inspect `helm history {state.name} -n {state.namespace}` and "
                    f"roll back to a good revision by hand (helm rollback {state.name} REVISION "
                    f"-n {state.namespace}), then run this step again"
                )
            args = ["rollback", state.name, str(revision), *ns, "--wait"]
        ctx.emit(
            Notice(
                f"release {state.label} is {state.status}: this wizard's own "
                f"`{interrupted_helm(ctx, state)}` was interrupted; resolving it with "
                f"`helm {shlex.join(args)}`",
                ctx.target,
            )
        )
        result = await helm.run(*args, on_line=lambda stream, line: ctx.emit(_output(line, stream)))
        if result.exit_status != 0:
            from wizard.transports.base import CommandFailedError

            raise CommandFailedError(result)

    async def _upgrade(self, ctx: StepContext, state: ReleaseState, content: str) -> None:
        """Exactly the reviewed values, to the release as it is named on the cluster."""
        helm = ctx.services.helm
        with tempfile.TemporaryDirectory(prefix="gnw-helm-") as tmp:
            values_file = Path(tmp) / "gpu-operator-values.yaml"
            values_file.write_text(content)
            values_file.chmod(0o600)
            result = await helm.run(
                *upgrade_args(ctx.site, str(values_file), state.name, state.namespace),
                on_line=lambda stream, line: ctx.emit(_output(line, stream)),
            )
        ctx.journal(
            {
                "target": "helm",
                "step": self.id,
                "command": result.command,
                "exit": result.exit_status,
                "stdout": result.stdout,
                "stderr": result.stderr,
            }
        )
        if result.exit_status != 0:
            from wizard.transports.base import CommandFailedError

            raise CommandFailedError(result)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T01")
        state = await read_state(ctx)
        pinned = ctx.site.versions.gpu_operator
        wanted = self._wanted(ctx)
        if not state.installed:
            report.fail("release", f"release {state.label} is not installed", "apply this step")
            return report.findings
        if state.chart_version != pinned or state.status != "deployed":
            report.fail(
                "release",
                f"release {state.label} is chart {state.chart_version} ({state.status}); the "
                f"site pins {pinned}",
                "review the upgrade (and its blast radius) and apply this step again",
            )
        elif not covers(state.user_values, wanted):
            missing = changed_keys(state.user_values, merge_values(state.user_values, wanted))
            report.fail(
                "release",
                f"release {state.label} lacks values the site needs: {', '.join(missing)}",
                "review the diff and apply this step again",
            )
        else:
            kept = len(changed_keys(wanted, state.user_values))
            report.ok(
                "release",
                f"release {state.label} runs chart {pinned} with the site's values"
                + (f" (and {kept} user value(s) of its own, kept)" if kept else ""),
            )
        self._coverage(ctx, state, report)
        return report.findings

    def _coverage(self, ctx: StepContext, state: ReleaseState, report: Report) -> None:
        """Whether the running operator reaches the new node(s): a tainted node needs the
        ClusterPolicy's operands and the NFD worker to tolerate the taint, and with the
        NVIDIADriver CRD an NVIDIADriver must select the node and tolerate it too."""
        taint = site_toleration(ctx.site)
        if taint is None:
            return
        gaps = []
        for policy in state.cluster_policies:
            operands = policy.get("spec", {}).get("daemonsets", {}).get("tolerations")
            if not tolerates(operands, taint):
                gaps.append(f"ClusterPolicy {policy['metadata']['name']} operands")
        if ctx.site.versions.nvidia_driver_crd:
            selected = [
                d
                for d in state.nvidia_drivers
                if (d.get("spec", {}).get("nodeSelector") or {}).items()
                <= dict(ctx.site.labels).items()
            ]
            if not any(tolerates(d["spec"].get("tolerations"), taint) for d in selected):
                gaps.append("no NVIDIADriver that selects the node tolerates it")
        for worker in state.nfd_workers:
            spec = worker.get("spec", {}).get("template", {}).get("spec", {})
            if not tolerates(spec.get("tolerations"), taint):
                meta = worker["metadata"]
                gaps.append(f"the NFD worker {meta['namespace']}/{meta['name']}")
        text = f"{taint['key']}={taint['value']}:{taint['effect']}"
        if gaps:
            report.fail(
                "covers-node",
                f"the taint {text} is not tolerated by: {'; '.join(gaps)}; the operator "
                "will not reach the new node",
                "review and apply this step (the site's values add the toleration)",
            )
        else:
            report.ok("covers-node", f"the operator's operands tolerate the taint {text}")


def _output(line: str, stream: str):
    from wizard.events import OutputLine

    return OutputLine("helm", line, stream)


def interrupted_helm(ctx: StepContext, state: ReleaseState) -> str | None:
    """This wizard's own helm command on the release that a kill interrupted: an intent in
    the journal without an outcome (wizard/checkpoint.py ``unfinished``). The site's lock
    says no other wizard runs now, so a release pending because of it is ours to resolve;
    a release pending for any other reason is another operator's, and is left alone."""
    for entry in ctx.unfinished():
        command = str(entry.get("command") or "")
        words = command.split()
        ours = entry.get("target") == "helm" and state.name in words and state.namespace in words
        if ours and any(w in words for w in ("upgrade", "install", "rollback")):
            return command
    return None


def last_deployed_revision(history_json: str) -> int | None:
    """The newest revision of ``helm history -o json`` that was deployed (status deployed,
    or superseded: deployed, then replaced), or None."""
    try:
        entries = json.loads(history_json or "[]")
    except ValueError:
        return None
    if not isinstance(entries, list):
        return None
    good = [
        e["revision"]
        for e in entries
        if isinstance(e, dict)
        and e.get("status") in ("deployed", "superseded")
        and isinstance(e.get("revision"), int)
        and not isinstance(e.get("revision"), bool)
    ]
    return max(good) if good else None


def _resolution(state: ReleaseState) -> str:
    if state.status == "pending-install":
        return f"`helm uninstall {state.name} -n {state.namespace}` (it was never deployed), then the install"
    return (
        f"`helm rollback {state.name} REVISION -n {state.namespace}` to the newest deployed "
        "revision (from helm history), then the upgrade"
    )
