"""The registry pull secret, present in every namespace that pulls, before anything pulls.

The chart values, the plugin's DaemonSet and the measurement pods name
``registry.pull_secret`` in imagePullSecrets, and the kubelet looks a pod's pull secret up in
the pod's own namespace: a secret that is missing there means an anonymous pull, refused by
an authenticated mirror (ErrImagePull), after the release or DaemonSet is already in place.
``helm --create-namespace`` creates the release's namespace empty. So this step runs before
the GPU Operator's release: in each namespace (the operator's is the existing release's,
which may be any, e.g. nvidia-gpu-operator; else gpu-operator) it verifies the secret (type
kubernetes.io/dockerconfigjson with an entry for the mirror's host) or creates it, from the
credentials in ``registry.username_env`` / ``password_env``, else as a copy of the same
secret found in another namespace. No credential is ever put into an artifact, the export
or the journal: the review shows where each secret comes from, not its data, and the
exported script reads the variables at run time, and the operator's namespace from
``$GNW_NAMESPACE``, which the runbook's gpu-operator.preflight line found and exported.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from steps.common import NAMESPACE_WORD, q
from steps.gpu_operator.release import OPERATOR_RELEASE, operator_release
from wizard.approvals import ClusterChange, ClusterEffect
from wizard.artifacts import Artifact, Target
from wizard.model import Finding, StepKind
from wizard.plan import Change, Scope, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.transports.kube import KubeError

SCRIPT_PATH = "cluster/k8s/pull-secrets.sh"
DOCKERCONFIG = "kubernetes.io/dockerconfigjson"
# Where the measurement pods run (steps.rdma_plugin.TEST_NAMESPACE, steps.nccl.manifests
# NAMESPACE; not imported: those modules import the GPU Operator phase this step is in).
MEASUREMENT_NAMESPACES = ("default",)


def pull_namespaces(site: Site, operator: str) -> list[str]:
    """Every namespace whose pods pull from the mirror: the GPU Operator's (``operator``:
    the existing release's, else the first install's), the RDMA device plugin's and the
    measurement pods'."""
    return sorted({operator, *site_namespaces(site)})


def site_namespaces(site: Site) -> list[str]:
    """The pull namespaces the site file names alone (the operator's is the cluster's)."""
    return sorted({site.device_plugin.namespace, *MEASUREMENT_NAMESPACES})


# The exported script's guard: the operator's namespace comes from the runbook's discovery.
NAMESPACE_GUARD = (
    ': "${GNW_NAMESPACE:?the GPU Operator release namespace: run the release line of '
    'gpu-operator.preflight in RUNBOOK.md first (it exports GNW_NAMESPACE)}"'
)


def exported_namespaces(site: Site) -> list[str]:
    """The script's namespaces as shell words: the release's (NAMESPACE_WORD) first."""
    return [NAMESPACE_WORD, *(q(ns) for ns in site_namespaces(site))]


def mirror_host(site: Site) -> str:
    return (site.registry.mirror or "").split("/", 1)[0]


def credentials(site: Site) -> tuple[str, str] | None:
    """The user and password from the environment variables the site names, or None."""
    user_var, password_var = site.registry.username_env, site.registry.password_env
    user = os.environ.get(user_var or "") if user_var else None
    password = os.environ.get(password_var or "") if password_var else None
    return (user, password) if user and password else None


def dockerconfig_secret(site: Site, namespace: str, user: str, password: str) -> dict[str, Any]:
    """The Secret ``kubectl create secret docker-registry`` makes (built in memory only)."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = {"auths": {mirror_host(site): {"username": user, "password": password, "auth": auth}}}
    data = base64.b64encode(json.dumps(config).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": DOCKERCONFIG,
        "metadata": {"name": site.registry.pull_secret, "namespace": namespace},
        "data": {".dockerconfigjson": data},
    }


def auths_of(secret: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``auths`` of a live dockerconfigjson Secret; None when it is none (absent,
    another type, unreadable data)."""
    if not secret or secret.get("type") != DOCKERCONFIG:
        return None
    try:
        raw = base64.b64decode((secret.get("data") or {}).get(".dockerconfigjson", ""))
        auths = json.loads(raw).get("auths")
    except (ValueError, AttributeError):
        return None
    return auths if isinstance(auths, dict) else None


def registry_host(key: str) -> str:
    return key.removeprefix("https://").split("/", 1)[0]


def serves_mirror(secret: dict[str, Any] | None, host: str) -> bool:
    """Whether a live Secret is a dockerconfigjson with an entry for the mirror's host."""
    return any(registry_host(key) == host for key in auths_of(secret) or {})


def merged_secret(live: dict[str, Any], entry: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """The live dockerconfigjson Secret with the mirror's ``entry`` (key, auth) added beside
    its own entries, which are kept (another registry's pulls go on working)."""
    auths = {**(auths_of(live) or {}), entry[0]: entry[1]}
    data = base64.b64encode(json.dumps({"auths": auths}).encode()).decode()
    meta = live.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Secret", "type": DOCKERCONFIG,
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "ownerReferences")
                         if k in meta},
            "data": {**(live.get("data") or {}), ".dockerconfigjson": data}}  # fmt: skip


async def live_secret(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await kube.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/secrets/{name}",
            what=f"get secret {namespace}/{name}",
        )
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


class PullSecrets(Step):
    id = "registry.pull-secrets"
    title = "Registry pull secret in every namespace that pulls"
    kind = StepKind.APPLY
    gates = ("T01",)
    scope = Scope.CLUSTER
    requires = ("gpu-operator.preflight",)
    needs = (OPERATOR_RELEASE,)  # the operator's pods pull in the release's namespace
    reads = ("registry", "device_plugin")
    explain = (
        "registry.pull_secret must exist in the GPU Operator release's namespace (the "
        "existing release's, any name: $GNW_NAMESPACE in the runbook; none: gpu-operator), "
        "the plugin's namespace and the measurement pods' namespace before anything pulls "
        "(the kubelet reads a pod's pull secret in its own namespace; helm "
        "--create-namespace creates the release's namespace empty). "
        "Verified where present (a dockerconfigjson for the mirror's host); created from the "
        "variables registry.username_env / password_env, or copied from another namespace "
        "that has it. Credentials never reach the export, the review or the journal."
    )

    def _needed(self, site: Site) -> bool:
        return bool(site.registry.pull_secret and site.registry.mirror)

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if not self._needed(site):
            return []
        name, host = q(site.registry.pull_secret or ""), q(mirror_host(site))
        user, password = site.registry.username_env, site.registry.password_env
        lines = ["#!/bin/sh", "# gpu-node-wizard: the pull secret in every namespace that pulls.",
                 "# Reads the credentials from the environment; writes none to disk.", "set -eu"]  # fmt: skip
        if not (user and password):
            lines.append("# The site names no registry.username_env/password_env: set them, or")
            lines.append("# copy the secret from a namespace that has it.")
            user, password = "REGISTRY_USER", "REGISTRY_PASSWORD"
        lines.append(NAMESPACE_GUARD)
        for ns in exported_namespaces(site):
            lines.append(
                f"kubectl create namespace {ns} --dry-run=client -o yaml | kubectl apply -f -"
            )
            # An existing secret is left as it is (the live step verifies it).
            lines.append(
                f"kubectl -n {ns} get secret {name} >/dev/null 2>&1 || "
                f"kubectl -n {ns} create secret docker-registry {name} --docker-server={host} "
                f'--docker-username="${user}" --docker-password="${password}"'
            )
        return [
            Artifact(
                SCRIPT_PATH,
                "\n".join(lines) + "\n",
                Target.SCRIPT,
                "run with kubectl against the cluster, before the GPU Operator",
                f"Secret {site.registry.pull_secret} in the GPU Operator release's namespace "
                f"($GNW_NAMESPACE), {', '.join(site_namespaces(site))}",
                mode=0o755,
            )
        ]

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if not self._needed(site):
            return []
        # The script first (it leaves an existing secret as it is, and creates a missing one),
        # then the reads that show it in every namespace; run from the jump host, in the
        # shell where gpu-operator.preflight's line exported $GNW_NAMESPACE.
        return [
            f"sh {SCRIPT_PATH}  # from the jump host; creates the secret where it is missing",
            *(
                f"kubectl -n {ns} get secret {q(site.registry.pull_secret or '')}"
                for ns in exported_namespaces(site)
            ),
        ]

    async def _sources(self, ctx: StepContext) -> tuple[dict[str, dict | None], dict | None]:
        """Each namespace's live secret, and one that serves the mirror (to copy)."""
        kube, site = ctx.services.kube, ctx.site
        live = {
            ns: await live_secret(kube, ns, site.registry.pull_secret or "")
            for ns in pull_namespaces(site, operator_release(ctx).namespace)
        }
        source = next((s for s in live.values() if serves_mirror(s, mirror_host(site))), None)
        return live, source

    async def preconditions(self, ctx: StepContext) -> list[Finding]:
        if not self._needed(ctx.site):
            return []
        report = Report("T01")
        registry = ctx.site.registry
        live, source = await self._sources(ctx)
        missing = [ns for ns, s in live.items() if not serves_mirror(s, mirror_host(ctx.site))]
        if missing and source is None and credentials(ctx.site) is None:
            named = " and ".join(v for v in (registry.username_env, registry.password_env) if v)
            report.fail(
                "pull-secret",
                f"Secret {registry.pull_secret} for {mirror_host(ctx.site)} is missing in "
                f"{', '.join(missing)} and cannot be made: "
                + (f"{named} not set in the environment" if named
                   else "registry.username_env / password_env are not set in the site"),
                "export the registry credentials in the variables the site names "
                "(registry.username_env, registry.password_env), or create the secret in one "
                "namespace; nothing pulls before it exists",
            )  # fmt: skip
        # A Secret of that name that is no pull secret is someone else's: never replaced.
        foreign = [ns for ns, s in live.items() if s is not None and auths_of(s) is None]
        if foreign:
            report.fail(
                "pull-secret-foreign",
                f"Secret {registry.pull_secret} in {', '.join(foreign)} exists but is not a "
                f"{DOCKERCONFIG} with readable auths: it is another object of that name, and "
                "the wizard does not replace it",
                "set registry.pull_secret to a name that namespace does not use, or make that "
                "Secret the mirror's pull secret yourself",
            )
        return report.findings

    async def _namespaces(self, ctx: StepContext) -> set[str]:
        """Which of the pull namespaces exist now (the others the wizard creates)."""
        found = set()
        for ns in pull_namespaces(ctx.site, operator_release(ctx).namespace):
            try:
                await ctx.services.kube.request(
                    "GET", f"/api/v1/namespaces/{ns}", what=f"get namespace {ns}"
                )
            except KubeError as exc:
                if exc.status != 404:
                    raise
                continue
            found.add(ns)
        return found

    async def changes(self, ctx: StepContext) -> list[Change]:
        """Per namespace: in place; absent (a new Secret for the new nodes, listed in the
        report); or present with other data, which is an update of an object that existed
        before: the mirror's entry merged into it, approved by name (pull-secret-update)."""
        if not self._needed(ctx.site):
            return []
        site = ctx.site
        name, host = site.registry.pull_secret or "", mirror_host(site)
        live, source = await self._sources(ctx)
        existing = await self._namespaces(ctx)
        origin = (
            f"from ${site.registry.username_env} / ${site.registry.password_env}"
            if credentials(site)
            else f"copied from {source['metadata']['namespace']}/{name}"
            if source
            else "no source"
        )
        result = []
        for ns, secret in live.items():
            # What the review shows: where the data comes from, never the data.
            shown = f"Secret {ns}/{name} ({DOCKERCONFIG}) for {host}\n"
            artifact = Artifact(
                f"cluster/k8s/pull-secret-{ns}.txt",
                shown + f"data: {origin} (not shown)\n",
                Target.DOCUMENT,
                f"Secret {ns}/{name}",
                "the registry pull secret",
            )
            if serves_mirror(secret, host):
                result.append(Change(artifact, artifact.content))
            elif secret is None:
                where = (
                    f"in the existing namespace {ns}" if ns in existing
                    else f"in namespace {ns}, created by the wizard"
                )  # fmt: skip
                why = f"the new nodes' pulls from {host} ({where})"
                result.append(Change(artifact, None, adds=(f"Secret {ns}/{name}", why)))
            else:
                others = sorted(registry_host(k) for k in auths_of(secret) or {})
                live_text = f"Secret {ns}/{name} ({DOCKERCONFIG}) for {', '.join(others) or 'no registry'}\n"
                effect = ClusterEffect(
                    ClusterChange.PULL_SECRET_UPDATE,
                    f"updates the existing Secret {ns}/{name}: adds an entry for {host} beside "
                    f"its entries for {', '.join(others) or 'no registry'} (kept); every pod in "
                    f"{ns} that names it pulls with the result from then on",
                )
                result.append(Change(artifact, live_text, effect=effect))
        return result

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        site, kube = ctx.site, ctx.services.kube
        host = mirror_host(site)
        live, source = await self._sources(ctx)
        creds = credentials(site)
        if creds is not None:
            entry_body = dockerconfig_secret(site, "", *creds)
        else:
            assert source is not None  # preconditions refused otherwise
            entry_body = source
        entry = next((k, v) for k, v in (auths_of(entry_body) or {}).items()
                     if registry_host(k) == host)  # fmt: skip
        for ns, secret in live.items():
            if serves_mirror(secret, host):
                continue
            if secret is not None:
                # Approved by name (pull-secret-update): merged, never replaced; the PUT
                # names the resourceVersion read, so a write in between is a 409, not lost.
                merged = merged_secret(secret, entry)
                merged["metadata"]["resourceVersion"] = secret["metadata"].get("resourceVersion")
                await kube.request(
                    "PUT",
                    f"/api/v1/namespaces/{ns}/secrets/{site.registry.pull_secret}",
                    merged,
                    what=f"update secret {ns}/{site.registry.pull_secret}",
                )
                continue
            if creds is not None:
                body = dockerconfig_secret(site, ns, *creds)
            else:
                body = {"apiVersion": "v1", "kind": "Secret", "type": DOCKERCONFIG,
                        "metadata": {"name": site.registry.pull_secret, "namespace": ns},
                        "data": dict(entry_body.get("data") or {})}  # fmt: skip
            try:
                namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                await kube.request(
                    "POST", "/api/v1/namespaces", namespace, what=f"create namespace {ns}"
                )
            except KubeError as exc:
                if exc.status != 409:
                    raise
            # Created, never replaced: a Secret someone made meanwhile is a 409 here.
            await kube.request(
                "POST", f"/api/v1/namespaces/{ns}/secrets", body,
                what=f"create secret {ns}/{site.registry.pull_secret}",
            )  # fmt: skip

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T01")
        site = ctx.site
        if not self._needed(site):
            report.ok("pull-secret", "no registry.pull_secret with a mirror: nothing to verify")
            return report.findings
        live, _ = await self._sources(ctx)
        missing = [ns for ns, s in live.items() if not serves_mirror(s, mirror_host(site))]
        if missing:
            report.fail(
                "pull-secret",
                f"Secret {site.registry.pull_secret} for {mirror_host(site)} is missing or not "
                f"a dockerconfigjson for that host in {', '.join(missing)}",
                f"apply this step again, or run {SCRIPT_PATH}",
            )
        else:
            report.ok(
                "pull-secret",
                f"Secret {site.registry.pull_secret} for {mirror_host(site)} present in "
                f"{', '.join(live)}",
            )
        return report.findings
