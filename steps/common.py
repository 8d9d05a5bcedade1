"""Small helpers shared by the phase modules."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from wizard.artifacts import Artifact, unified_diff
from wizard.facts import Command
from wizard.facts.rdma import RDMA_LINK
from wizard.model import Evidence
from wizard.plan import Change
from wizard.site import Node, Site
from wizard.transports.base import WRITE_VALUE_SCRIPT, read_file_command

if TYPE_CHECKING:
    from wizard.plan import StepContext
    from wizard.probe import Read, Report


def q(value: object) -> str:
    """Shell-quote one value for a command shown in the runbook or sent to a host."""
    return shlex.quote(str(value))


# -- the runbook's form of the commands a step runs -------------------------------------------
#
# A step builds each command once (an argv list, or a Read) and both runs it and lists it in
# the runbook (``commands()``) from that one definition. Values that only exist at run time
# are placeholders: ``<rdma-dev>`` and ``<gid-index>`` (discovered on the host the command
# runs on). A trailing comment may say where the command runs (``on aistor-01``, ``from the
# jump host``; default: the step's node, or the jump host for a cluster step) and when.

PLACEHOLDER = re.compile(r"<[a-z][a-z0-9-]*>")

# The runbook's one reference to the site's kubeconfig: its opening block exports
# KUBECONFIG (the site's cluster.kubeconfig, resolved to an absolute path), so every
# kubectl and helm line reads the same file whatever folder the site file was in.
KUBECONFIG_WORD = '"$KUBECONFIG"'
# The GPU Operator release's name and namespace, as the runbook's `helm list -A` line found
# them (steps/gpu_operator/runbook.py sets both variables).
RELEASE_WORD = '"$GNW_RELEASE"'
NAMESPACE_WORD = '"$GNW_NAMESPACE"'
_SHELL_WORDS = frozenset({KUBECONFIG_WORD, RELEASE_WORD, NAMESPACE_WORD})


def shown(command: str | Sequence[str] | Command[Any], note: str = "") -> str:
    """One runbook line: an argv shell-quoted as the wizard sends it (a string as written),
    placeholders left readable, and an optional trailing comment. The value-writing helper
    (``write_value_command``) is shown as the printf line it runs."""
    if isinstance(command, Command):
        command = command.argv
    if isinstance(command, str):
        text = command
    elif list(command[:3]) == ["sh", "-c", WRITE_VALUE_SCRIPT] and len(command) == 6:
        text = f"printf '%s\\n' {_word(str(command[4]))} > {_word(str(command[5]))}"
    else:
        text = " ".join(_word(str(part)) for part in command)
    return f"{text}  # {note}" if note else text


def finished_then_logs(
    namespace: str, resource: str, timeout_s: int, *, condition: str | None = None
) -> list[str]:
    """The runbook's lines that read what a test pod, Job or MPIJob printed: ``kubectl wait``
    until it finished (a pod: phase Succeeded; otherwise ``condition``), then its logs. A
    ``kubectl logs`` straight after ``apply`` reads a container that is not running yet.
    The timeout is the wizard's own for the same wait."""
    wanted = f"condition={condition}" if condition else "jsonpath={.status.phase}=Succeeded"
    return [
        shown(
            ["kubectl", "-n", namespace, "wait", f"--for={wanted}", resource,
             f"--timeout={timeout_s}s"],
            f"on a timeout: kubectl -n {namespace} describe {resource}",
        ),
        shown(["kubectl", "-n", namespace, "logs", resource]),
    ]  # fmt: skip


def _word(part: str) -> str:
    if part in _SHELL_WORDS:
        return part
    if not PLACEHOLDER.search(part):
        return shlex.quote(part)
    # Quote the text around a placeholder, never the placeholder itself.
    holes = PLACEHOLDER.findall(part)
    pieces = [
        shlex.quote(p) if p and not _SAFE.fullmatch(p) else p for p in PLACEHOLDER.split(part)
    ]
    return "".join(piece + hole for piece, hole in zip(pieces, [*holes, ""], strict=True))


_SAFE = re.compile(r"[\w@%+=:,./-]+")


def read_lines(reads: Iterable[Read], note: str = "") -> list[str]:
    """The runbook lines of a step's reads: each with its Read's own note, the first also
    with ``note`` (what the group is for)."""
    lines = []
    for i, r in enumerate(reads):
        text = "; ".join(n for n in (note if i == 0 else "", r.note) if n)
        lines.append(shown(r.command, text))
    return lines


def on_host(host: str, when: str = "") -> str:
    """The trailing note of a command that runs on another host than the step's node."""
    return f"on {host}, {when}" if when else f"on {host}"


def host_file_lines(artifacts: Iterable[Artifact]) -> tuple[list[str], list[str]]:
    """(reads, writes) of a step's host files: ``cat`` of each (the diff against live), and
    the write of each changed one, as an ``install`` of the export's file (the wizard sends
    the content over SSH to the same path, atomically, with the same mode)."""
    files = [a for a in artifacts if a.host_path]
    reads = [shown(read_file_command(a.host_path)) for a in files]  # type: ignore[arg-type]
    writes = [
        shown(["install", "-m", f"{a.mode:04o}", a.path, a.host_path], "when it differs")
        for a in files
    ]
    return reads, writes


RDMA_LINKS = RDMA_LINK  # the RDMA devices, their netdevs and states (a typed Command)
LSMOD = ["lsmod"]


def priv_flags_command(port: str) -> list[str]:
    return ["ethtool", "--show-priv-flags", port]


def bonding_command(node: Node) -> list[str]:
    """The bonding driver's view of the node's bond (slaves, LACP partner, speeds)."""
    return ["cat", f"/proc/net/bonding/{node.bond.name}"]


def stats_command(port: str) -> list[str]:
    """A port's driver counters (per-priority pause, errors)."""
    return ["ethtool", "-S", port]


def ports(node: Node | None) -> list[str]:
    return list(node.bond.ports) if node else []


def bond_name(node: Node | None) -> str:
    return node.bond.name if node else "bond1"


def pod_placement(site: Site) -> dict[str, Any]:
    """What every pod the wizard runs on a GPU node needs: the taint toleration, pull secret."""
    extras: dict[str, Any] = {}
    if site.taint.enabled:
        t = site.taint
        extras["tolerations"] = [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
        ]
    if site.registry.pull_secret:
        extras["imagePullSecrets"] = [{"name": site.registry.pull_secret}]
    return extras


def node_pod(
    site: Site,
    node: Node,
    name: str,
    namespace: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A run-once pod pinned to ``node`` (labelled as the wizard's, so it can be found).

    It tolerates the cordon (node.kubernetes.io/unschedulable, the taint the node
    lifecycle controller puts on a cordoned node): the wizard proves a node it drained
    (after a reboot, a QoS change) before it uncordons it, and the scheduler would
    otherwise leave the proof pod Pending, as the real control plane showed.
    """
    placement = pod_placement(site)
    cordon = {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node.name},
        "containers": [container],
        **({"volumes": volumes} if volumes else {}),
        **placement,
        "tolerations": [*placement.get("tolerations", []), cordon],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpu-node-wizard"},
        },
        "spec": spec,
    }


SHM_VOLUME = {"name": "shm", "emptyDir": {"medium": "Memory"}}
SHM_MOUNT = {"name": "shm", "mountPath": "/dev/shm"}


async def host_file_changes(ctx: StepContext, artifacts: list[Artifact]) -> list[Change]:
    """Each host file against what is on the node now (None: absent)."""
    return [Change(a, await ctx.read_file(a.host_path)) for a in artifacts if a.host_path]


async def write_host_files(ctx: StepContext, changes: list[Change]) -> list[str]:
    """Write the changed host files (atomically, with their modes); return their paths."""
    written = []
    for change in changes:
        artifact = change.artifact
        if artifact.host_path and change.changed:
            await ctx.write_file(artifact.host_path, artifact.content, artifact.mode)
            written.append(artifact.host_path)
    return written


async def check_host_files(
    ctx: StepContext, report: Report, name: str, artifacts: list[Artifact]
) -> None:
    """A finding per host file: in place, or different from what the wizard wants."""
    for artifact in artifacts:
        if not artifact.host_path:
            continue
        live = await ctx.read_file(artifact.host_path)
        if live == artifact.content:
            report.ok(name, f"{artifact.host_path} is in place")
        elif live is None:
            report.fail(name, f"{artifact.host_path} is missing", "apply this step again")
        else:
            lines = changed_lines(live, artifact.content, artifact.host_path)
            report.fail(
                name,
                f"{artifact.host_path} differs from what the wizard wants in "
                f"{len(lines)} line(s) (- found, + expected)",
                "apply this step again",
                Evidence(shlex.join(read_file_command(artifact.host_path)), diff_excerpt(lines)),
            )


DIFF_LINES_SHOWN = 8  # a failed verification's changed lines, the first ones


def changed_lines(live: str, desired: str, destination: str) -> list[str]:
    """The lines that differ, "-" as found and "+" as expected (no context, no headers)."""
    diff = unified_diff(live, desired, destination).splitlines()
    return [
        line
        for line in diff
        if line[:1] in "+-" and not line.startswith(("--- live", "+++ desired"))
    ]


def diff_excerpt(lines: list[str]) -> str:
    shown = lines[:DIFF_LINES_SHOWN]
    more = len(lines) - len(shown)
    return "\n".join(shown + ([f"[... {more} more changed lines]"] if more else []))
