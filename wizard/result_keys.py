"""Typed result keys: what one step records for the steps after it, declared once.

A ``ResultKey`` names the producing step, the key in that step's recorded data and the
type the value has once stored (JSON: str, int, float, bool, list or dict). It is declared
next to the producing step, listed in that step's ``provides``, and in the ``needs`` of a
step that cannot run without it (the engine blocks that step with the reason when the
result was not recorded: ``missing_result``) or the ``uses`` of a step that can say what
it does without it (``StepContext.result_if_any`` returns ``None`` then, never a made-up
default). No step reads another step's record by its name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wizard.errors import WizardError

if TYPE_CHECKING:
    from wizard.checkpoint import StepRecord
    from wizard.plan import Plan, Step

T = TypeVar("T")

CLUSTER = "cluster"  # the target name of cluster-scope steps (wizard.plan.CLUSTER)


@dataclass(frozen=True)
class ResultKey(Generic[T]):
    """One typed result: ``provider`` records ``name`` as a ``kind``.

    ``section`` is where in the provider's step record it is kept: ``"extra"`` (its data,
    what ``ctx.provide`` writes) or ``""`` for a field of the record itself (a measurement
    step's ``measurements``, see ``measurements_of``)."""

    provider: str
    name: str
    kind: type[T]
    doc: str = ""
    section: str = "extra"

    def read(self, record: StepRecord) -> Any:
        """The raw value in a provider's step record (None: not recorded)."""
        if not record.recorded:
            return None
        if self.section == "extra":
            return record.result.get(self.name)
        held = getattr(record, self.name, None)  # a field of the record (its measurements)
        return dict(held) if isinstance(held, Mapping) else held

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}"

    def check(self, value: Any, reader: str) -> T:
        """``value`` as recorded, refused when it is not a ``kind`` (a checkpoint from
        another version, or a producer that broke its contract)."""
        # bool is an int in Python; a recorded True is no device index
        wrong_bool = isinstance(value, bool) and self.kind is not bool
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # type: ignore[return-value]
        if wrong_bool or not isinstance(value, self.kind):
            raise MissingResultError(
                reader,
                self,
                f"recorded a {type(value).__name__}, not the {self.kind.__name__} it declares",
            )
        return value


def measurements_of(step_id: str) -> ResultKey[dict[str, Any]]:
    """The measurements a measure step recorded (name -> {value, unit, labels}), as a
    result for the steps that compare with them (a baseline for the QoS measurement)."""
    return ResultKey(step_id, "measurements", dict, f"what {step_id} measured", section="")


class MissingResultError(WizardError):
    """A step needs a result an earlier step did not record (or recorded wrongly)."""

    def __init__(self, step: str, key: ResultKey[Any], why: str = "did not record it") -> None:
        self.key = key
        super().__init__(f"{step} needs {key.name!r} from {key.provider}, which {why}")


def missing_result(
    plan: Plan,
    step: Step,
    target: str,
    nodes: list[str],
    record: Callable[[str, str], StepRecord],
) -> str | None:
    """Why ``step`` on ``target`` cannot run yet: the first result it ``needs`` that its
    provider did not record, with where and what to run. A cluster-scope step that needs a
    node step's result needs it from every node (``nodes``): its input is the fleet's."""
    for key in step.needs:
        provider = plan.step(key.provider)
        if target == CLUSTER and provider.scope.value != CLUSTER:
            where = nodes
        else:
            where = [CLUSTER if provider.scope.value == CLUSTER else target]
        for on in where:
            found = record(key.provider, on)
            if key.read(found) is None:
                state = found.state.value
                there = "" if on == target else f" on {on}"
                return (
                    f"needs {key.name} from {key.provider} ({provider.title}){there}, which "
                    f"did not record it (it is {state}); run {key.provider} on {on} first"
                )
    return None
