"""What an engine run returns and raises, and the small pure helpers every part of the
engine shares (a transport failure as a finding, a verdict as a state, a change as a diff)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wizard.artifacts import unified_diff
from wizard.errors import WizardError
from wizard.events import ArtifactDiff, Decision
from wizard.model import Finding, Severity, StepKind, StepState, worst
from wizard.plan import Change, Step
from wizard.transports.base import (
    AuthenticationError,
    CommandFailedError,
    CommandTimeoutError,
    HostKeyError,
    TransportError,
)


class Aborted(WizardError):
    """The operator aborted the run at a decision."""

    exit_code = 1


class DecisionRequired(WizardError):
    """A non-interactive front end met a decision it has no standing answer for."""

    exit_code = 1

    def __init__(self, decision: Decision, how: str) -> None:
        self.decision = decision
        super().__init__(
            f"stopped at step {decision.step} on {decision.target}: "
            f"{decision.kind.value} needs an answer ({how}): {decision.summary}"
        )


class ChildStillRunningError(WizardError):
    """A change a stopped run started is still being made by its own process (a killed
    wizard's ansible-playbook): a resume must not start a second one beside it."""

    exit_code = 1


@dataclass
class RunSummary:
    """What one engine run did: the state of every (step, target) it touched."""

    results: dict[tuple[str, str], StepState] = field(default_factory=dict)
    findings: dict[tuple[str, str], list[Finding]] = field(default_factory=dict)
    stopped: str | None = None  # why the run ended early, if it did
    reset: list[tuple[str, str]] = field(default_factory=list)
    # Maintenance changes in flight that a read-only run found and could not finish, each
    # with the command that does.
    in_flight: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[tuple[str, str]]:
        return [k for k, s in self.results.items() if s in (StepState.FAILED, StepState.BLOCKED)]

    @property
    def ok(self) -> bool:
        return not self.failed and self.stopped is None and not self.in_flight


CHANGING = (StepKind.APPLY, StepKind.MAINTENANCE)


def transport_finding(step: Step, exc: TransportError) -> Finding:
    """A failure to reach or use a host/cluster, as a finding that says what to do."""
    if isinstance(exc, CommandFailedError):
        name, fix = (
            "command",
            "read the command's error above, fix the cause on the host, then retry",
        )
    elif isinstance(exc, HostKeyError):
        name, fix = "reachable", "verify the host key and update known_hosts (see the message)"
    elif isinstance(exc, AuthenticationError):
        name, fix = "reachable", "check ssh.user / ssh.key in the site file and sudo rights"
    elif isinstance(exc, CommandTimeoutError):
        name, fix = (
            "timeout",
            "the host is slow or the command hangs; raise ssh.command_timeout or check the host",
        )
    else:
        name, fix = (
            "reachable",
            "check the address, the network path and that sshd / the API server runs",
        )
    return Finding(*step.engine_check(name), Severity.FAIL, str(exc), fix)


def state_for(findings: list[Finding]) -> StepState:
    return StepState.FAILED if worst(findings) is Severity.FAIL else StepState.DONE


def artifact_diff(change: Change) -> ArtifactDiff:
    artifact = change.artifact
    return ArtifactDiff(
        artifact.path,
        artifact.destination,
        unified_diff(change.live, artifact.content, artifact.destination),
        change.changed,
    )
