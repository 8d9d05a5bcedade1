"""The exported runbook acts on the existing GPU Operator release's namespace (#30 M4, the
export half): at a site whose release runs in nvidia-gpu-operator (lab fault
operator-other-namespace), an operator following RUNBOOK.md's registry and GPU Operator
sections puts the pull secret there, upgrades the release there, reads its pods and DCGM
exporter there, and creates nothing in gpu-operator.

The export names no namespace of its own for the operator: gpu-operator.preflight's line
finds the release with `helm list -A -o json` and exports GNW_RELEASE and GNW_NAMESPACE
before the first line that needs them (the pull-secrets script, a program of its own, sees
only exported variables; the follower passes on only what the shell exported). The lines
run from the export folder in one shell, as the runbook says: helm is the lab's stand-in
(it keeps the releases in the lab's API server), the node's lines run on the lab's node
over the exported ssh_config, and kubectl is tests/kubectl_standin.py (the embedded API
server serves no discovery, so the real kubectl cannot use it: see that module for what it
does, and what is judged from its record rather than from a cluster's answer).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from simulator.existing import OTHER_NAMESPACE
from steps import build_plan
from steps.common import NAMESPACE_WORD
from steps.gpu_operator.runbook import discovery_line
from steps.gpu_operator.values import NAMESPACE
from tests.conftest import MINIMAL_SITE, REPO, served_lab
from tests.runbook_follower import BLOCK, Follower, follow_section, sections
from wizard.export import RUNBOOK, collect, export
from wizard.site import load_site, parse_site

# The sections followed, in the runbook's order (its phase 8 up to the verification).
FOLLOWED = ("gpu-operator.preflight", "registry.pull-secrets", "gpu-operator.install",
            "gpu-operator.verify")  # fmt: skip
# What the embedded lab cannot answer, and what it says instead: the helm stand-in keeps no
# repositories (the chart is the lab's own, `helm show chart` answers for it); the site's
# new node is not joined in this lab (the join phase is not followed here), so neither
# Kubespray nor the toolkit wrote its containerd config.
LAB_LIMITS = {
    " repo ": "the lab's helm needs --kubeconfig",
    "/etc/containerd/": "No such file",
}
# How an exported line names a namespace.
NAMED = re.compile(r"(?:-n|--namespace)[ =](\S+)|namespaces/([^/\s\"]+)|namespace (\S+)")


def _api(server: str, path: str) -> dict | None:
    try:
        with urllib.request.urlopen(server + path, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def _kubectl(folder: Path) -> Path:
    """A bin folder whose kubectl is the stand-in (run by this interpreter: it needs yaml)."""
    folder.mkdir(parents=True)
    script = folder / "kubectl"
    script.write_text(
        f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
        f'{shlex.quote(str(REPO / "tests" / "kubectl_standin.py"))} "$@"\n'
    )
    script.chmod(0o755)
    return folder


def test_the_runbook_followed_acts_on_the_existing_releases_namespace(tmp_path):
    site_file = tmp_path / "lab" / "site.yaml"
    out = tmp_path / "export"
    log = tmp_path / "kubectl.jsonl"
    with served_lab(site_file, "operator-other-namespace"):
        site = load_site(site_file)
        server = yaml.safe_load(site.resolve_path(site.cluster.kubeconfig).read_text())
        server = server["clusters"][0]["cluster"]["server"]
        export(site, build_plan(), out)
        text = (out / RUNBOOK).read_text()
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["PATH"] = f"{_kubectl(tmp_path / 'bin')}{os.pathsep}{env['PATH']}"
        # The credentials the exported script reads (the lab's site names no variables).
        env |= {"REGISTRY_USER": "lab-puller", "REGISTRY_PASSWORD": "lab-pull-password"}
        env["GNW_KUBECTL_LOG"] = str(log)
        writer = re.search(r"as the wizard writes it[^`]*`(ssh [^`]* < FILE)`", text)
        assert writer
        hosts = {n.name: n.host for n in site.nodes}
        follower = Follower(out, BLOCK.findall(text)[0], site.nodes[0].host, hosts, env,
                            lab_limits=LAB_LIMITS, file_writer=writer.group(1))  # fmt: skip
        followed = []
        for step, section in sections(text):
            if step in FOLLOWED:
                follower.env["GNW_KUBECTL_SECTION"] = step
                follow_section(follower, section)
                followed.append(step)
        assert followed == list(FOLLOWED)
        # The release found, exported to every later line (a shell variable alone would
        # not reach the pull-secrets script).
        assert follower.env["GNW_NAMESPACE"] == OTHER_NAMESPACE
        secret = _api(server, f"/api/v1/namespaces/{OTHER_NAMESPACE}/secrets/nexus-pull")
        assert secret is not None and secret["type"] == "kubernetes.io/dockerconfigjson"
        assert _api(server, f"/api/v1/namespaces/{NAMESPACE}") is None  # nothing made there
        assert _api(server, f"/api/v1/namespaces/{NAMESPACE}/secrets/nexus-pull") is None
        releases = _api(server, "/lab/v1/helm/releases")
    assert list(releases) == [f"{OTHER_NAMESPACE}/gpu-operator"]  # upgraded in place
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    named = {c["namespace"] for c in calls if c["namespace"]}
    assert NAMESPACE not in named and OTHER_NAMESPACE in named
    verify = [c for c in calls if c["section"] == "gpu-operator.verify"]
    # Its pods, the toolkit's wait and rollout, the exporter pod's lookup, the test pod's
    # apply, wait and logs: all in the release's namespace.
    assert len([c for c in verify if c["namespace"]]) >= 7, verify
    assert {c["namespace"] for c in verify if c["namespace"]} == {OTHER_NAMESPACE}
    raw = [c["argv"] for c in verify if "--raw" in c["argv"]]
    assert raw and all(
        a[a.index("--raw") + 1].startswith(f"/api/v1/namespaces/{OTHER_NAMESPACE}/pods/")
        for a in raw
    ), raw


def exported_lines(site_text: str) -> list[str]:
    """Every command line and script line the export holds, with its RUNBOOK."""
    site = parse_site(site_text)
    artifacts, blocks = collect(site, build_plan())
    lines = [c for step in blocks.values() for b in step for c in b.commands]
    lines += [b.by_hand for step in blocks.values() for b in step if b.by_hand]
    lines += [b.rollback for step in blocks.values() for b in step if b.rollback]
    lines += [a.content for a in artifacts if a.path.endswith(".sh")]
    return [line for text in lines for line in text.splitlines()]


def test_no_exported_line_names_the_first_installs_namespace():
    """Every line that names the operator's namespace names the discovered one: the
    first install's gpu-operator only in the discovery's own fallback (a first install)."""
    lines = exported_lines(
        MINIMAL_SITE + "registry: {mirror: m.site:5000/nvidia, pull_secret: p}\n"
    )
    hard = [
        line
        for line in lines
        for match in NAMED.finditer(line.split("  # ", 1)[0])
        if NAMESPACE in {g.strip("'\"") for g in match.groups() if g}
    ]
    assert hard == []
    users = [line for line in lines if NAMESPACE_WORD in line.split("  # ", 1)[0]]
    assert len(users) >= 10, users  # the script's, verify's and the DCGM read's at least


def test_the_release_is_found_and_exported_before_the_first_line_that_needs_it(tmp_path):
    site = parse_site(MINIMAL_SITE + "registry: {mirror: m.site:5000/nvidia, pull_secret: p}\n")
    export(site, build_plan(), tmp_path / "out")
    text = (tmp_path / "out" / RUNBOOK).read_text()
    lines = [line.split("  # ", 1)[0] for b in BLOCK.findall(text) for line in b.splitlines()]
    found = [i for i, line in enumerate(lines) if '"export GNW_RELEASE="' in line]
    assert len(found) == 1, "one line finds the release"
    needs = [i for i, line in enumerate(lines)
             if "$GNW_NAMESPACE" in line or "pull-secrets.sh" in line]  # fmt: skip
    assert needs and min(needs) > found[0]
    # The script itself refuses to run without it, before any kubectl.
    script = (tmp_path / "out" / "cluster/k8s/pull-secrets.sh").read_text()
    first = next(i for i, line in enumerate(script.splitlines()) if "kubectl" in line)
    assert "${GNW_NAMESPACE:?" in "\n".join(script.splitlines()[:first])


def _release(name: str, namespace: str) -> dict[str, str]:
    return {"name": name, "namespace": namespace, "chart": "gpu-operator-v26.7.0"}


def test_the_release_line_finds_one_release_falls_back_to_a_first_install_and_stops_on_two():
    """Run as the runbook runs it (`sh -e`), with `helm list -A -o json`'s answer given: the
    variables reach a program the next line starts; two releases stop the shell there (an
    bare `eval "$(...)"` of the failed rule's empty output would go on)."""

    def run(releases: list[dict[str, str]]) -> subprocess.CompletedProcess:
        line = discovery_line(f"printf '%s' {shlex.quote(json.dumps(releases))}")
        return subprocess.run(
            ["sh", "-ec", f'{line}\nsh -c \'printf "%s %s" "$GNW_RELEASE" "$GNW_NAMESPACE"\''],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    other = [_release("gpu-operator-1712345678", OTHER_NAMESPACE),
             {"name": "web", "namespace": "default", "chart": "nginx-1.2.3"}]  # fmt: skip
    assert run(other).stdout == f"gpu-operator-1712345678 {OTHER_NAMESPACE}"
    assert run([]).stdout == f"gpu-operator {NAMESPACE}"  # a first install
    two = run([_release("a", "ns-a"), _release("b", "ns-b")])
    assert two.returncode != 0 and two.stdout == ""
    assert "more than one release of chart gpu-operator: ns-a/a, ns-b/b" in two.stderr
