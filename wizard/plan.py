"""Steps and phases: what the engine runs, and what the runbook and export describe.

A step is declared once and serves three front ends: the engine runs it (``verify``,
``changes`` + ``apply``, ``measure``), the export writes its ``artifacts``, and the
runbook prints its ``commands`` and ``explain`` text. Steps live in ``steps/``, one module
per phase; they never import Textual.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from wizard.approvals import ClusterEffect
from wizard.artifacts import Artifact
from wizard.events import Event
from wizard.model import NO_GATE, Finding, Measurement, StepKind, StepState
from wizard.result_keys import ResultKey
from wizard.site import AIStorPeer, Node, Site
from wizard.transports.base import CommandResult, HostTransport

CLUSTER = "cluster"  # the target name of cluster-scope steps

T = TypeVar("T")


class Scope(StrEnum):
    NODE = "node"  # once per GPU node, concurrently across nodes
    CLUSTER = "cluster"  # once for the site


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
    # What it changes outside the new nodes, when anything: applied only once the operator
    # approved it by name (wizard/approvals.py, wizard/engine/cluster_gate.py).
    effect: ClusterEffect | None = None
    # The new object applying it creates, when it creates one that serves only the new
    # nodes ("Secret gpu-operator/nexus-pull", and why): no approval, but the report lists
    # it under "Added for the new nodes". An update of an existing object is an ``effect``.
    adds: tuple[str, str] | None = None

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
    # Results of earlier steps this one cannot run without (``ResultKey``s, declared next
    # to the step that records them), read on the same node (a cluster-scope step needing
    # a node step's result needs it from every node): the engine blocks the step with the
    # reason when one was not recorded (``wizard.result_keys.missing_result``), and
    # ``ctx.need(KEY)`` returns it typed. Never a silent default in its place.
    needs: ClassVar[tuple[ResultKey[Any], ...]] = ()
    # Results this step reads when they exist and says what it does without them (a
    # comparison with a baseline, a fallback to a live read): ``ctx.result_if_any(KEY)``
    # returns the typed value or None. Neither blocks nor skips the step.
    uses: ClassVar[tuple[ResultKey[Any], ...]] = ()
    # The results this step records in ``ctx.data`` for the steps that need them (each
    # ``ResultKey``'s provider is this step; tests/test_crash_safety.py checks it).
    provides: ClassVar[tuple[ResultKey[Any], ...]] = ()
    # A measurement that must not share its far end: nodes run in waves in which no two
    # runs hold the same resource (``measured_with``: the node and its AIStor peer), so
    # that each number is the node's own rather than a share of the peer's link. With one
    # peer the nodes take turns; with several, as many run at once as there are peers.
    one_node_at_a_time: ClassVar[bool] = False
    # A measurement that loads its far end (perftest at line rate, iperf3 -P, the soak, a
    # storage benchmark): against a production AIStor peer the engine asks first for a typed
    # confirmation naming the peer (wizard/engine/storage_gate.py).
    loads_far_end: ClassVar[bool] = False
    # Checks of this step that no waiver may pass, by their full name ("T00.containerd-
    # version"), each with why: what fails later if the run went on without it. The TUI
    # offers no waiver for them and ``--waive`` refuses them (``Plan.hard_requirement``).
    hard_requirements: ClassVar[Mapping[str, str]] = {}

    @property
    def gate(self) -> str | None:
        """The gate a finding of the engine's own about this step (a bug, an unreachable
        host, a held lease) counts against: its first; None when it proves no gate."""
        return self.gates[0] if self.gates else None

    def engine_check(self, name: str) -> tuple[str, str]:
        """The check name and gate of the engine's own finding ``name`` about this step:
        "<gate>.<name>" on its gate, or "<step>.<name>" on ``NO_GATE`` when it proves none."""
        gate = self.gate
        return (f"{self.id}.{name}", NO_GATE) if gate is None else (f"{gate}.{name}", gate)

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

    def by_hand(self, site: Site, node: Node | None) -> str | None:
        """For a step whose "Commands" list alternatives and conditions (who manages the
        bond, `unless ... shows`, `until ...`): the shell lines an operator runs instead,
        from the export folder, that do the same through the exported files (the runbook's
        "By hand" block); None where the "Commands" block can be followed as it stands."""
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
    """One phase of the procedure. What the engine, the runners, the report and the
    screens treat specially is said here, as the phase's capabilities, never by its id."""

    id: str
    number: int
    title: str
    summary: str
    steps: tuple[Step, ...]
    # Its checks only read the host (nothing before them changes anything): `check` runs
    # them, with no requirement, on a node the wizard has not touched yet.
    read_only: bool = False
    # It makes the node a member of the cluster: results from here on belong to the
    # Kubernetes Node object, so a node deleted and joined again resets them.
    joins_cluster: bool = False

    @property
    def measures(self) -> bool:
        """Whether it measures (perftest, NCCL, storage): its numbers are the report's."""
        return any(step.kind is StepKind.MEASURE for step in self.steps)


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


def load_rate_gbps(site: Site, node: str) -> float | None:
    """The bandwidth cap of a load run from ``node`` (``aistor.load_rate_gbps``) when its far
    end is a production AIStor peer; None (line rate) otherwise."""
    far, peer = measurement_far_end(site, node), measurement_peer(site, node)
    if far is None or far.is_node or peer is None or not peer.production:
        return None
    return site.aistor.load_rate_gbps


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

    def read_only_steps(self) -> list[str]:
        """The check steps of the read-only phases: what `check` runs."""
        return [
            step.id
            for phase in self.phases
            if phase.read_only
            for step in phase.steps
            if step.kind is StepKind.CHECK
        ]

    def join_phase(self) -> Phase | None:
        """The phase that joins the nodes to the cluster (None: the plan has none)."""
        return next((phase for phase in self.phases if phase.joins_cluster), None)

    def after_join(self, phase: Phase) -> bool:
        """Whether ``phase`` runs on a node that is in the cluster (the join phase too)."""
        join = self.join_phase()
        return join is not None and phase.number >= join.number

    def phase_of(self, step_id: str) -> Phase:
        for phase in self.phases:
            if any(step.id == step_id for step in phase.steps):
                return phase
        raise KeyError(step_id)

    def hard_requirement(self, check: str) -> str | None:
        """Why ``check`` may not be waived (a step declares it in ``hard_requirements``),
        or None when a waiver with a reason may pass it."""
        for step in self.steps():
            if check in step.hard_requirements:
                return step.hard_requirements[check]
        return None

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
                and (frontier & set(s.requires) or frontier & {k.provider for k in s.needs})
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
            for up in [*step.requires, *(k.provider for k in step.needs)]:
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


@runtime_checkable
class StepContext(Protocol):
    """What a step sees while it runs on one target: the site and its node, the transports,
    the results of earlier steps, and of the engine only these calls. The engine implements
    it (``wizard.engine.runtime.StepRuntime``); the plan and the steps never import the
    engine (the import contract "plan-no-engine" in pyproject.toml)."""

    site: Site
    step: Step
    target: str
    node: Node | None
    services: Services
    measurements: list[Measurement]
    data: dict[str, Any]  # stored with the step record
    use_oob: bool  # reach the node through its out-of-band address
    effects: bool  # set by the engine while the step applies or rolls back

    @property
    def host(self) -> HostTransport: ...

    def host_for(self, name: str) -> HostTransport: ...

    def waiting(self, message: str) -> None:
        """Record 'waiting' (e.g. for a reboot) with the data so far; resumable elsewhere."""

    def wait_begins(self, message: str, timeout_s: float) -> None:
        """This step now waits (at most ``timeout_s``) for something outside the wizard."""

    def wait_ends(self) -> None:
        """The wait of ``wait_begins`` is over, and the step goes on."""

    async def run(
        self,
        command: str | Sequence[str],
        *,
        on: str | None = None,
        sudo: bool | None = None,
        timeout: float | None = None,
        check: bool = False,
        stdin: str | None = None,
        expected: Mapping[int, str] | None = None,
    ) -> CommandResult:
        """Run a command on this target (or host ``on``): journaled, streamed as events."""
        ...

    async def run_many(
        self,
        commands: Sequence[str | Sequence[str]],
        *,
        on: str | None = None,
        sudo: bool | None = None,
        timeout: float | None = None,
        expected: Sequence[Mapping[int, str] | None] = (),
    ) -> list[CommandResult]:
        """Independent read-only commands on this target, sent together."""
        ...

    async def shared(self, name: str, read: Callable[[], Awaitable[T]]) -> T:
        """A read made once per step run and shared by the whole fan-out."""
        ...

    def need(self, key: ResultKey[T], *, on: str | None = None) -> T:
        """A result this step declared in ``needs``, typed."""
        ...

    def result_if_any(self, key: ResultKey[T], *, on: str | None = None) -> T | None:
        """A result this step declared in ``uses``: typed, or None."""
        ...

    def provide(self, key: ResultKey[T], value: T) -> None:
        """Record a result this step declared in ``provides``."""

    async def read_file(self, path: str, *, on: str | None = None) -> str | None:
        """A file's content on the host, or None when it does not exist."""
        ...

    async def write_file(
        self, path: str, content: str, mode: int = 0o644, *, on: str | None = None
    ) -> None:
        """Write a file on the host atomically (temp file + rename); raises on failure."""

    def record(self, name: str, value: float, unit: str, **labels: str) -> None:
        """Record a measurement for this step and target."""

    def emit(self, event: Event) -> None:
        """Show an event to the operator (redacted, as every event)."""

    def journal(self, entry: dict[str, Any]) -> None:
        """Append an entry to the run's journal (a tool's run the step made itself)."""

    @property
    def wants_output_lines(self) -> bool:
        """Whether the front end shows commands' output line by line."""
        ...

    def note_boot(self, boot_id: str) -> None:
        """This target booted anew (the reboot step): that boot is the known one."""

    def state_of(self, step_id: str) -> StepState:
        """The recorded state of another step on this target."""
        ...

    def plan_step(self, step_id: str) -> Step:
        """Another step of the plan, by id."""
        ...

    def as_step(self, step: Step, data: dict[str, Any]) -> StepContext:
        """This target's context running ``step`` with ``data`` as its record."""
        ...

    def unfinished(self) -> list[dict[str, Any]]:
        """The journal's intents without an outcome: effects a kill interrupted."""
        ...
