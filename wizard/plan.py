"""Steps and phases: what the engine runs, and what the runbook and export describe.

A step is declared once and serves three front ends: the engine runs it (``verify``,
``changes`` + ``apply``, ``measure``), the export writes its ``artifacts``, and the
runbook prints its ``commands`` and ``explain`` text. Steps live in ``steps/``, one module
per phase; they never import Textual.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from wizard.artifacts import Artifact
from wizard.errors import WizardError
from wizard.events import CommandFinished, CommandStarted, OutputLine, Waiting
from wizard.model import Finding, Measurement, StepKind, StepState
from wizard.site import AIStorPeer, Node, Site
from wizard.transports.base import (
    CommandResult,
    HostTransport,
    read_file_command,
    render_command,
    write_file_command,
)

if TYPE_CHECKING:
    from wizard.engine import Engine

CLUSTER = "cluster"  # the target name of cluster-scope steps

T = TypeVar("T")


class Scope(StrEnum):
    NODE = "node"  # once per GPU node, concurrently across nodes
    CLUSTER = "cluster"  # once for the site


class MissingResultError(WizardError):
    """A step needs a result an earlier step did not record."""

    def __init__(self, step: str, provider: str, key: str) -> None:
        super().__init__(f"{step} needs {key!r} from {provider}, which did not record it")


class NotAutomated(Exception):
    """The step has no automated check yet: the operator follows the runbook by hand."""


@dataclass(frozen=True)
class Change:
    """One artifact the step wants in place, with what is there now (None: absent)."""

    artifact: Artifact
    live: str | None
    # What applying it touches beyond the artifact itself (a Helm upgrade that restarts the
    # driver on every GPU node): shown in the review, with the diff.
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.live != self.artifact.content


class Step:
    """Base of every step. Subclasses set the class attributes and override what they do.

    - check: ``verify`` returns findings.
    - apply / maintenance: ``changes`` (desired vs live), then ``apply``, then ``verify``.
    - measure: ``measure`` runs benchmarks, records numbers, returns findings.
    - manual: ``instructions`` for the operator, then ``verify``.
    """

    id: ClassVar[str]
    title: ClassVar[str]
    kind: ClassVar[StepKind]
    gates: ClassVar[tuple[str, ...]] = ()
    scope: ClassVar[Scope] = Scope.NODE
    requires: ClassVar[tuple[str, ...]] = ()  # step ids that must be done first
    # The parts of the site file this step depends on; a change there resets the step on
    # resume (``Plan.invalidated``). Each entry is one of:
    # - a top-level key of Site ("qos", "cluster", "aistor"): any change under it, down to
    #   one AIStor peer's fields;
    # - "node.<field>", a field of Node ("node.bond", "node.host"): that field of the step's
    #   own node; on a cluster-scope step, that field of any node, so adding or removing a
    #   node counts too;
    # - "node": any field of the node (on a cluster-scope step: of any node).
    # The node list itself is never a read ("nodes"): say which node fields matter.
    # tests/test_step_reads.py checks every step's names against the Site and Node models.
    reads: ClassVar[tuple[str, ...]] = ()
    explain: ClassVar[str] = ""
    # Results of earlier steps this one uses, as (step id, key) on the same node: the
    # engine blocks the step with the reason when one was not recorded, and
    # ``ctx.need(key)`` reads it. Never a silent default in its place.
    needs: ClassVar[tuple[tuple[str, str], ...]] = ()
    # The keys this step records in ``ctx.data`` for the steps that need them.
    provides: ClassVar[tuple[str, ...]] = ()
    # A measurement that must not share its far end: nodes run in waves in which no two
    # runs hold the same resource (``measured_with``: the node and its AIStor peer), so
    # that each number is the node's own rather than a share of the peer's link. With one
    # peer the nodes take turns; with several, as many run at once as there are peers.
    one_node_at_a_time: ClassVar[bool] = False
    # A measurement that loads its far end (perftest at line rate, iperf3 -P, the soak, a
    # storage benchmark): against a production AIStor peer the engine asks first for a typed
    # confirmation naming the peer (wizard/engine/storage_gate.py).
    loads_far_end: ClassVar[bool] = False

    def measured_with(self, site: Site, target: str) -> frozenset[str]:
        """What a run of this step on ``target`` holds exclusively (``one_node_at_a_time``):
        the node and the far end it measures against (an AIStor peer or its pair node)."""
        far = measurement_far_end(site, target)
        if far is None:
            return frozenset({f"node:{target}"})
        return frozenset({f"node:{target}", f"{'node' if far.is_node else 'peer'}:{far.name}"})

    # -- descriptions (runbook, export): pure, no I/O ----------------------------------

    def commands(self, site: Site, node: Node | None) -> list[str]:
        """The exact commands this step runs (or asks the operator to run) on ``node``."""
        return []

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        """The files this step renders for ``node`` (or for the cluster)."""
        return []

    def instructions(self, site: Site, node: Node | None) -> str:
        """For manual steps: what the operator does outside the wizard."""
        return ""

    def runs_itself(self, site: Site) -> bool:
        """For manual steps: whether this site lets the wizard do the step itself (then the
        engine runs it as an apply step: changes, review, apply, verify)."""
        return False

    def leased_nodes(self, site: Site) -> tuple[str, ...]:
        """For cluster-scoped steps that change nodes (the join's scale.yml --limit): the
        nodes whose leases the engine takes before the change (wizard/engine/leases.py).
        A node-scoped step's lease is its target's, taken without asking."""
        return ()

    def rollback(self, site: Site, node: Node | None) -> str | None:
        """For maintenance steps: how to undo the change (the dry-run form, for the export)."""
        return None

    # -- maintenance pieces (kind MAINTENANCE) ------------------------------------------------
    # The engine owns the sequence (wizard/engine.py, "maintenance"): window gate ->
    # capture persisted with an intent -> cordon/drain -> apply -> verify -> roll back from
    # the persisted capture on failure -> uncordon only when verified. A step supplies:

    # cordon and drain around the change (and uncordon once it verified)
    drains: ClassVar[bool] = True
    # False: nothing to roll back to (a reboot); the engine offers no rollback
    reversible: ClassVar[bool] = True
    # False: a settled result that no longer holds after a reboot is failed, never run
    # again on its own (the reboot step: the outside reboot already was the proof it runs
    # for; running it again would reboot the node once more). `--redo` runs it anew.
    rerun_when_lost: ClassVar[bool] = True

    async def capture(self, ctx: StepContext) -> dict[str, Any]:
        """The live state the change would be rolled back to, as JSON. Taken once, before
        the first effect, and persisted; a resume after a kill uses the persisted one."""
        return {}

    def rollback_plan(self, site: Site, node: Node | None, capture: dict[str, Any]) -> str | None:
        """The rollback computed from a capture (shown at the window gate)."""
        return self.rollback(site, node)

    def actions(self, site: Site, node: Node | None) -> list[str]:
        """The change in order, one line an action, for the window gate (the engine adds
        cordon/drain before and uncordon after)."""
        return [line for line in self.commands(site, node) if not line.startswith("#")]

    # -- actions (engine) ---------------------------------------------------------------

    async def verify(self, ctx: StepContext) -> list[Finding]:
        raise NotAutomated

    async def changes(self, ctx: StepContext) -> list[Change]:
        raise NotAutomated

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        """Make the change. A maintenance step's apply must converge: it reads what is live
        and does only what is missing, because a resume after a kill runs it again."""
        raise NotAutomated

    async def measure(self, ctx: StepContext) -> list[Finding]:
        raise NotAutomated

    async def preconditions(self, ctx: StepContext) -> list[Finding]:
        """Checked before any decision is asked: a failure refuses the step outright."""
        return []

    async def finish(self, ctx: StepContext, ok: bool) -> None:
        """After verification (maintenance steps): e.g. uncordon only when it passed."""
        return None

    async def undo(self, ctx: StepContext) -> list[Finding]:
        """Roll back to ``ctx.data["capture"]`` (maintenance); findings describe the result."""
        raise NotAutomated


@dataclass(frozen=True)
class Phase:
    id: str
    number: int
    title: str
    summary: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class FarEnd:
    """Where a node's measurement runs its server: an AIStor peer, or with
    ``measurements.pair_nodes`` the other GPU node of its pair."""

    name: str
    rdma_ip: str
    rdma_device: str | None
    is_node: bool


def measurement_peer(site: Site, node: str) -> AIStorPeer | None:
    """The AIStor peer a node measures against: the peers in turn (node i takes peer
    i mod P), so that a fleet's measurements spread over every peer the site lists."""
    peers = site.aistor.peers
    if not peers:
        return None
    names = [n.name for n in site.nodes]
    index = names.index(node) if node in names else 0
    return peers[index % len(peers)]


def measurement_far_end(site: Site, node: str) -> FarEnd | None:
    """The far end of ``node``'s measurements. With ``pair_nodes`` and two or more nodes,
    node 2k and 2k+1 measure each other (an odd last node pairs with the first); otherwise
    its AIStor peer (``measurement_peer``)."""
    names = [n.name for n in site.nodes]
    if site.measurements.pair_nodes and len(names) > 1 and node in names:
        index = names.index(node)
        partner = index ^ 1 if (index ^ 1) < len(names) else 0
        other = site.nodes[partner]
        return FarEnd(other.name, other.rdma_ip, None, is_node=True)
    peer = measurement_peer(site, node)
    if peer is None:
        return None
    return FarEnd(peer.name, peer.rdma_ip, peer.rdma_device, is_node=False)


def capped_load_seconds(site: Site, node: str, seconds: int) -> int:
    """``seconds`` of load, capped at ``aistor.load_max_seconds`` when the far end of
    ``node``'s measurements is a production AIStor peer."""
    far, peer = measurement_far_end(site, node), measurement_peer(site, node)
    if far is None or far.is_node or peer is None or not peer.production:
        return seconds
    return min(seconds, site.aistor.load_max_seconds)


def measurement_waves(
    targets: Sequence[str], holds: Callable[[str], frozenset[str]]
) -> list[list[str]]:
    """Targets packed into waves, first fit, so that no two targets of a wave hold the same
    resource: as parallel as the shared far ends allow, in the targets' order."""
    waves: list[tuple[list[str], set[str]]] = []
    for target in targets:
        needs = holds(target)
        for members, held in waves:
            if not needs & held:
                members.append(target)
                held.update(needs)
                break
        else:
            waves.append(([target], set(needs)))
    return [members for members, _ in waves]


def describe_waves(step: Step, site: Site, waves: Sequence[Sequence[str]]) -> str:
    """The schedule of a measurement in one line, shown before it runs: how many waves,
    and in each, which node measures against what."""

    def run(target: str) -> str:
        others = sorted(r.partition(":")[2] or r for r in step.measured_with(site, target)
                        if r != f"node:{target}")  # fmt: skip
        return f"{target}->{'+'.join(others)}" if others else target

    shown = "; ".join(f"wave {i}: {', '.join(run(t) for t in wave)}"
                      for i, wave in enumerate(waves[:4], 1))  # fmt: skip
    more = f"; ... {len(waves) - 4} more" if len(waves) > 4 else ""
    widest = max((len(w) for w in waves), default=0)
    return f"{len(waves)} wave(s), up to {widest} at once, no far end shared: {shown}{more}"


@dataclass(frozen=True)
class Plan:
    phases: tuple[Phase, ...]
    # Artifacts that span phases (the Ansible hand-off), rendered from the site alone.
    extra_artifacts: tuple[Callable[[Site], list[Artifact]], ...] = ()

    def steps(self) -> list[Step]:
        return [step for phase in self.phases for step in phase.steps]

    def step(self, step_id: str) -> Step:
        for step in self.steps():
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    def phase(self, phase_id: str) -> Phase:
        for phase in self.phases:
            if phase.id == phase_id or str(phase.number) == phase_id:
                return phase
        raise KeyError(phase_id)

    def phase_of(self, step_id: str) -> Phase:
        for phase in self.phases:
            if any(step.id == step_id for step in phase.steps):
                return phase
        raise KeyError(step_id)

    def dependents(self, step_id: str) -> list[Step]:
        """The steps that build on ``step_id``, directly or through one another: those that
        require it or need a result it records (in plan order). What skipping it holds back."""
        found: set[str] = set()
        frontier = {step_id}
        while frontier:
            after = {
                s.id
                for s in self.steps()
                if s.id not in found
                and (frontier & set(s.requires) or frontier & {p for p, _ in s.needs})
            }
            found |= after
            frontier = after
        return [s for s in self.steps() if s.id in found]

    def upstream(self, step_id: str) -> list[Step]:
        """The steps ``step_id`` builds on, directly or through one another (what it
        requires or needs a result of), nearest first: where a failure here may start."""
        order: list[str] = []
        frontier = [step_id]
        while frontier:
            step = self.step(frontier.pop(0))
            for up in [*step.requires, *(p for p, _ in step.needs)]:
                if up not in order and up != step_id:
                    order.append(up)
                    frontier.append(up)
        return [self.step(s) for s in order]

    def targets(self, step: Step, site: Site) -> list[str]:
        return [CLUSTER] if step.scope == Scope.CLUSTER else [n.name for n in site.nodes]

    def invalidated(self, changed: Sequence[str], site: Site) -> list[tuple[str, str]]:
        """(step, target) pairs that a change of the given site sections invalidates."""
        return [
            (step.id, target)
            for step in self.steps()
            for target in self.targets(step, site)
            if any(read_matches(read, key, target) for read in step.reads for key in changed)
        ]


def read_matches(read: str, section: str, target: str) -> bool:
    """Whether a change of ``section`` (a key of ``Site.sections()``) touches a step that runs
    on ``target`` and declares ``read`` (see ``Step.reads``)."""
    if read == "node" or read.startswith("node."):
        # Node sections are "nodes.<node name>.<field>"; a field name has no dot, a node
        # name may (a DNS subdomain).
        owner, _, field = section.rpartition(".")
        if not owner.startswith("nodes."):
            return False
        if target != CLUSTER and owner != f"nodes.{target}":
            return False
        return read == "node" or field == read.removeprefix("node.")
    return section == read or section.startswith(f"{read}.")


@dataclass
class Services:
    """What steps may reach: host transports by node/peer name, the cluster, Helm."""

    hosts: dict[str, HostTransport] = field(default_factory=dict)
    kube: Any = None
    helm: Any = None


@dataclass
class StepContext:
    """Everything a step needs while it runs on one target."""

    site: Site
    step: Step
    target: str
    node: Node | None
    services: Services
    engine: Engine
    measurements: list[Measurement] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # stored with the step record
    use_oob: bool = False  # reach the node through its out-of-band address
    # Set by the engine while the step applies or rolls back: every command is then an
    # effect, journaled ahead (intent fsynced before it runs, outcome after).
    effects: bool = False

    @property
    def host(self) -> HostTransport:
        return self.host_for(self.target)

    def host_for(self, name: str) -> HostTransport:
        if self.use_oob and name in getattr(self.services, "oob_hosts", {}):
            return self.services.oob_hosts[name]
        try:
            return self.services.hosts[name]
        except KeyError:
            raise KeyError(f"no transport for host {name!r}") from None

    def waiting(self, message: str) -> None:
        """Record 'waiting' (e.g. for a reboot) with the data so far; resumable elsewhere."""
        self.engine.checkpoint.set_step(
            self.step.id, self.target, StepState.WAITING, message=message, extra=dict(self.data)
        )

    def wait_begins(self, message: str, timeout_s: float) -> None:
        """Tell the front end that this step now waits (at most ``timeout_s``) for
        something outside the wizard, so that the operator sees a countdown, not a hang."""
        self.engine.emit(Waiting(self.step.id, self.target, message, timeout_s))

    async def run(
        self,
        command: str | Sequence[str],
        *,
        on: str | None = None,
        sudo: bool | None = None,
        timeout: float | None = None,
        check: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run a command on this target (or host ``on``): journaled, streamed as events."""
        name = on or self.target
        host = self.host_for(name)
        text = render_command(command)
        if sudo is None:
            sudo = self._sudo_default(name)
        emit = self.engine.emit
        intent = (
            self.engine.checkpoint.intent({"target": name, "step": self.step.id, "command": text})
            if self.effects
            else None
        )
        emit(CommandStarted(name, text))
        started = time.monotonic()
        try:
            result = await host.run(
                command,
                sudo=sudo,
                timeout=timeout,
                check=check,
                stdin=stdin,
                on_line=(
                    (lambda stream, line: emit(OutputLine(name, line, stream)))
                    if self.engine.frontend.wants_output_lines
                    else None
                ),
            )
        except BaseException as exc:
            entry = {"target": name, "step": self.step.id, "command": text, "error": str(exc)}
            if intent is not None:
                self.engine.checkpoint.outcome(intent, entry)
            else:
                self.engine.journal(entry)
            raise
        emit(CommandFinished(name, text, result.exit_status, time.monotonic() - started))
        self._journal_result(name, result, intent=intent)
        return result

    async def run_many(
        self,
        commands: Sequence[str | Sequence[str]],
        *,
        on: str | None = None,
        sudo: bool | None = None,
        timeout: float | None = None,
    ) -> list[CommandResult]:
        """Independent read-only commands on this target, sent together (one exec over
        SSH); each is journaled and shown as if it ran alone."""
        name = on or self.target
        host = self.host_for(name)
        texts = [render_command(c) for c in commands]
        if sudo is None:
            sudo = self._sudo_default(name)
        emit = self.engine.emit
        checkpoint = self.engine.checkpoint
        intent = (
            checkpoint.intent({"target": name, "step": self.step.id, "commands": texts})
            if self.effects
            else None
        )
        for text in texts:
            emit(CommandStarted(name, text))
        try:
            results = await host.run_many(commands, sudo=sudo, timeout=timeout)
        except BaseException as exc:
            entry = {"target": name, "step": self.step.id, "commands": texts, "error": str(exc)}
            if intent is not None:
                checkpoint.outcome(intent, entry)
            else:
                self.engine.journal(entry)
            raise
        if intent is not None:
            checkpoint.outcome(
                intent, {"target": name, "step": self.step.id, "batch": len(results)}
            )
        for result in results:
            if self.engine.frontend.wants_output_lines:
                for stream, output in (("stdout", result.stdout), ("stderr", result.stderr)):
                    for line in output.splitlines():
                        emit(OutputLine(name, line, stream))
            emit(CommandFinished(name, result.command, result.exit_status, result.duration_s))
            self._journal_result(name, result, batch=len(results))
        return results

    def _journal_result(
        self, name: str, result: CommandResult, batch: int = 1, intent: str | None = None
    ) -> None:
        entry = {
            "target": name,
            "step": self.step.id,
            "command": result.command,
            "exit": result.exit_status,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "duration_s": round(result.duration_s, 3),
            "dry_run": result.dry_run,
        }
        if batch > 1:
            entry["batch_of"] = batch  # ran in one exec with others; duration is the batch's
        if intent is not None:
            self.engine.checkpoint.outcome(intent, entry)
        else:
            self.engine.journal(entry)

    async def shared(self, name: str, read: Callable[[], Awaitable[T]]) -> T:
        """A read whose answer is the same for every target of this step (e.g. the
        cluster's node list): made once per step run and shared by the whole fan-out,
        instead of once per node."""
        return await self.engine.shared_read((self.step.id, name), read)

    def need(self, key: str) -> Any:
        """A result this step declared in ``needs`` (the engine blocked the step if the
        providing step did not record it)."""
        for step_id, name in self.step.needs:
            if name == key:
                value = self.recorded(step_id).get(key)
                if value is None:
                    raise MissingResultError(self.step.id, step_id, key)
                return value
        raise KeyError(f"{self.step.id} uses {key!r} without declaring it in `needs`")

    def recorded(self, step_id: str, target: str | None = None) -> dict[str, Any]:
        """What an earlier step stored for a target (its ``data``), e.g. discovered devices."""
        record = self.engine.checkpoint.record(step_id, target or self.target)
        return record.get("extra", {})

    async def read_file(self, path: str, *, on: str | None = None) -> str | None:
        """A file's content on the host, or None when it does not exist."""
        result = await self.run(read_file_command(path), on=on)
        return result.stdout if result.exit_status == 0 else None

    async def write_file(
        self, path: str, content: str, mode: int = 0o644, *, on: str | None = None
    ) -> None:
        """Write a file on the host atomically (temp file + rename); raises on failure."""
        await self.run(write_file_command(path, mode), on=on, stdin=content, check=True)

    def record(self, name: str, value: float, unit: str, **labels: str) -> None:
        """Record a measurement for this step and target."""
        self.measurements.append(Measurement(name, value, unit, dict(labels)))

    def _sudo_default(self, name: str) -> bool:
        try:  # the site's index: a scan per command was O(nodes) each, O(nodes^2) a run
            return self.site.node(name).ssh.use_sudo
        except KeyError:
            pass
        for peer in self.site.aistor.peers:
            if peer.name == name:
                return peer.ssh.use_sudo
        return False
