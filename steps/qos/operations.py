"""The QoS change of one port, declared once: ordered operations, each a read (a command
and the fields of its output), the value it must end with (the guard: an operation whose
read already shows it does nothing), the effect that sets it, and its undo (the same
effect with the value the capture read before the change).

Everything else is rendered from these declarations: the live run executes them here
(``converge``, ``pending``, ``capture``), the exported and boot-time scripts run the shell
rendering of the very same reads, values and effects (``shell_*``, with three generic
helpers in templates/host/qos/lib.sh.j2: ``observe``, ``member``, ``effect``), and the
runbook shows each effect with its guard (``runbook_lines``). So the script's end state is
the live run's, by construction, and both read the port again before every operation: the
ice driver changes more than it was asked (the first DSCP entry resets ETS, the last one
deleted resets DCB to its default), which a plan made from one read would miss.

Values are the words of the read's lines as the tool prints them (``prio-pfc 0:off ...``),
so an effect is its command followed by the value's words, and a capture is a list of
values: one reader in Python (``fields``) and its shell twin ``fields`` in lib.sh, the
only parser written twice (a dozen lines; iproute2's text output, dcb/dcb.c
dcb_print_named_array: a space after every value, so lines are compared by their words).
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from steps.qos.model import desired_bandwidth
from wizard.site import Site

PRESENT, ABSENT = "present", "absent"
# Where apply-qos.sh (and the live run, when it finds none) keeps the capture on the node,
# for rollback-qos.sh (lib.sh.j2 CAPTURE_FILE).
CAPTURE_FILE = "/var/lib/gpu-node-wizard/qos-capture"


def fields(output: str, keys: tuple[str, ...]) -> str:
    """For each key in order, ``KEY word ...`` of the first output line whose first word
    is the key (a ``:`` after the key dropped, as ethtool prints its flags); keys with no
    line are left out. Linear in the output."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        words = line.split()
        if words and words[0] in keys and words[0] not in found:
            rest = words[1:]
            if rest[:1] == [":"]:
                rest = rest[1:]
            found[words[0]] = " ".join([words[0], *rest])
    return " ".join(found[key] for key in keys if key in found)


@dataclass(frozen=True)
class Operation:
    """One setting of a port. Scalar: the value is the read's fields and the effect is
    ``command`` followed by the value's words. Membership (``entry``): the value is
    whether ``entry`` is among the fields' words, ``add`` or ``remove`` its effect."""

    name: str  # the capture's key for it (unique per port)
    what: str  # for people
    read: tuple[str, ...]
    keys: tuple[str, ...]
    command: tuple[str, ...] = ()
    entry: str | None = None
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()

    def value(self, output: str) -> str:
        words = fields(output, self.keys)
        if self.entry is None:
            return words
        return PRESENT if self.entry in words.split()[1:] else ABSENT

    def effect(self, value: str) -> list[str]:
        if self.entry is None:
            return [*self.command, *value.split()]
        return list(self.add if value == PRESENT else self.remove)


@dataclass(frozen=True)
class Target:
    """An operation and the value it must end with: ``want`` given, or (None) the value
    the capture holds for it. ``only``: act only when that value is this one (a rollback
    removes DSCP entries before it adds any: ice refuses a second mapping of a DSCP)."""

    op: Operation
    want: str | None
    only: str | None = None
    # A rollback's PFC and ETS: skipped when the capture shows the firmware LLDP agent on
    # (the firmware owned them; the agent's start replaces them anyway: ice_init_pf_dcb).
    firmware_skips: bool = False


def _pairs(values: Iterable[object]) -> str:
    return " ".join(f"{i}:{v}" for i, v in enumerate(values))


def lldp(port: str) -> Operation:
    return Operation(
        "lldp",
        "the firmware LLDP agent",
        ("ethtool", "--show-priv-flags", port),
        ("fw-lldp-agent",),
        command=("ethtool", "--set-priv-flags", port),
    )


def dscp_entry(port: str, dscp: int, prio: int) -> Operation:
    entry = f"{dscp}:{prio}"
    app = ("dcb", "app")
    return Operation(
        f"dscp-{entry}",
        f"the DSCP entry {entry}",
        ("dcb", "-N", "app", "show", "dev", port, "dscp-prio"),
        ("dscp-prio",),
        entry=entry,
        add=(*app, "add", "dev", port, "dscp-prio", entry),
        remove=(*app, "del", "dev", port, "dscp-prio", entry),
    )


def pfc(port: str) -> Operation:
    return Operation(
        "pfc",
        "PFC per priority",
        ("dcb", "pfc", "show", "dev", port),
        ("prio-pfc",),
        command=("dcb", "pfc", "set", "dev", port),
    )


def ets(port: str) -> Operation:
    """Transmission selection and bandwidth per TC, one `dcb ets set` (iproute2 checks
    that the ETS shares total 100 % against what it sends)."""
    return Operation(
        "ets",
        "ETS (selection and bandwidth per TC)",
        ("dcb", "ets", "show", "dev", port),
        ("tc-tsa", "tc-bw"),
        command=("dcb", "ets", "set", "dev", port),
    )


def ets_map(port: str) -> Operation:
    """The priority -> TC map with ETS, one `dcb ets set` of all three: only a rollback
    sets it (in DSCP mode ice maps priority n to TC n and ignores prio-tc; a map with gaps
    disables DCB: ice_dcb_noncontig_cfg). Together, because ice checks the bandwidth against
    the map it is given (ice_dcbnl_setets -> ice_dcb_bwchk): sent alone after the last DSCP
    entry is deleted (one TC), a two-TC bandwidth is stored with TC0 forced to 100 %, and
    iproute2 then refuses the next `dcb ets set` ("tc-bw sum to 150%", dcb/dcb_ets.c)."""
    return Operation(
        "ets-map",
        "the priority-to-TC map with ETS",
        ("dcb", "ets", "show", "dev", port),
        ("prio-tc", "tc-tsa", "tc-bw"),
        command=("dcb", "ets", "set", "dev", port),
    )


def pfc_value(priorities: Iterable[int]) -> str:
    on = set(priorities)
    return f"prio-pfc {_pairs('on' if p in on else 'off' for p in range(8))}"


def ets_value(bandwidth: Iterable[int]) -> str:
    return f"tc-tsa {_pairs(['ets'] * 8)} tc-bw {_pairs(bandwidth)}"


def operations(site: Site, port: str) -> list[Operation]:
    """Every setting of a port the change touches or a rollback restores, in the order
    the ice driver takes them (the capture reads these)."""
    dscp = site.qos.dscp
    return [
        lldp(port),
        *(dscp_entry(port, dscp, prio) for prio in range(8)),
        pfc(port),
        ets(port),
        ets_map(port),
    ]


def reads(site: Site, port: str) -> list[tuple[str, ...]]:
    """The commands the operations read (each once until the next effect)."""
    return list(dict.fromkeys(op.read for op in operations(site, port)))


def apply_targets(site: Site, port: str) -> list[Target]:
    """The change of one port, in the ice driver's order: the firmware LLDP agent off
    (software DCB needs it off); another mapping of the DSCP value removed (``dcb app
    replace`` cannot move it: ice refuses the add, "DSCP value ... already user mapped");
    the DSCP entry (the first one switches the port to L3 mode, which resets ETS to TC0 =
    100 % and maps priority n to TC n: ice_dcbnl_setapp); PFC; ETS last, bandwidth only."""
    qos = site.qos
    ops = {op.name: op for op in operations(site, port)}
    return [
        Target(ops["lldp"], "fw-lldp-agent off"),
        *(
            Target(ops[f"dscp-{qos.dscp}:{prio}"], ABSENT)
            for prio in range(8)
            if prio != qos.priority
        ),
        Target(ops[f"dscp-{qos.dscp}:{qos.priority}"], PRESENT),
        Target(ops["pfc"], pfc_value(qos.pfc_priorities)),
        Target(ops["ets"], ets_value(desired_bandwidth(site))),
    ]


def restore_targets(site: Site, port: str) -> list[Target]:
    """The undo of one port, to the captured values: the LLDP agent off while DCB is
    changed, the DSCP entries (removals first; the last one deleted switches the port back
    to VLAN mode, which resets DCB to its default: ice_dcb_sw_dflt_cfg), PFC, ETS, the
    priority map, the LLDP agent as it was last."""
    ops = operations(site, port)
    entries = [op for op in ops if op.entry is not None]
    by_name = {op.name: op for op in ops}
    return [
        Target(by_name["lldp"], "fw-lldp-agent off"),
        *(Target(op, None, ABSENT) for op in entries),
        *(Target(op, None, PRESENT) for op in entries),
        Target(by_name["pfc"], None, firmware_skips=True),
        Target(by_name["ets-map"], None, firmware_skips=True),
        Target(by_name["lldp"], None),
    ]


# With the firmware LLDP agent on, DCB is the firmware's (DCBX from the switch): a port
# whose agent is on, and was on when captured, has nothing a rollback could restore.
FIRMWARE_OWNED = "fw-lldp-agent on"


# -- the live run --------------------------------------------------------------------------


class Answer(Protocol):
    stdout: str


Run = Callable[[list[str]], Awaitable[Answer]]


class Reader:
    """Reads for the operations, each command once until the next effect (what it shows
    can only change through an effect)."""

    def __init__(self, run: Run, effect: Run) -> None:
        self._run, self._effect = run, effect
        self._seen: dict[tuple[str, ...], str] = {}

    async def value(self, op: Operation) -> str:
        if op.read not in self._seen:
            self._seen[op.read] = (await self._run(list(op.read))).stdout
        return op.value(self._seen[op.read])

    async def effect(self, argv: list[str]) -> None:
        self._seen.clear()
        await self._effect(argv)


def _wanted(target: Target, captured: dict[str, str] | None) -> str | None:
    if target.want is not None:
        return target.want
    captured = captured or {}
    if target.firmware_skips and captured.get("lldp") == FIRMWARE_OWNED:
        return None
    value = captured.get(target.op.name)
    if value is None or (target.only is not None and value != target.only):
        return None
    return value


async def converge(
    reader: Reader, targets: list[Target], captured: dict[str, str] | None = None
) -> list[list[str]]:
    """Run each target's effect where its read does not show its value; the effects run."""
    done = []
    if captured is not None and await _firmware_owned(reader, targets, captured):
        return done
    for target in targets:
        want = _wanted(target, captured)
        if want is not None and await reader.value(target.op) != want:
            argv = target.op.effect(want)
            await reader.effect(argv)
            done.append(argv)
    return done


def finals(targets: list[Target]) -> list[Target]:
    """The value each operation ends with (its last target), in the order of the first:
    what a port must show once the targets ran (a rollback's ordering passes are one)."""
    last: dict[str, Target] = {}
    for target in targets:
        last[target.op.name] = Target(target.op, target.want, firmware_skips=target.firmware_skips)
    order = list(dict.fromkeys(t.op.name for t in targets))
    return [last[name] for name in order]


async def pending(
    reader: Reader, targets: list[Target], captured: dict[str, str] | None = None
) -> list[str]:
    """What differs from the end state of the targets now (nothing: the port is there)."""
    if captured is not None and await _firmware_owned(reader, targets, captured):
        return []
    result = []
    for target in finals(targets):
        want = _wanted(target, captured)
        if want is not None and (now := await reader.value(target.op)) != want:
            result.append(f"{target.op.what}: {now or 'nothing'}, not {want}")
    return result


async def _firmware_owned(reader: Reader, targets: list[Target], captured: dict[str, str]) -> bool:
    agent = next(t.op for t in targets if t.op.name == "lldp")
    return captured.get("lldp") == FIRMWARE_OWNED and await reader.value(agent) == FIRMWARE_OWNED


async def capture(reader: Reader, site: Site, port: str) -> dict[str, str]:
    """Every operation's value as it is now: what a rollback restores."""
    return {op.name: await reader.value(op) for op in operations(site, port)}


def capture_gaps(site: Site, port: str, captured: dict[str, str] | None) -> list[str]:
    """The operations of a port a capture holds no value for: a capture made for another
    ``qos.dscp`` (its entries are other operations) or by an older wizard. A rollback from
    it would skip those silently, so it refuses instead."""
    return [op.what for op in operations(site, port) if op.name not in (captured or {})]


# -- the shell rendering (templates/host/qos/lib.sh.j2 has observe, member, effect) --------


def _q(value: str) -> str:
    return shlex.quote(value)


def shell_observe(op: Operation) -> str:
    """Sets $value to the operation's value, as ``Operation.value`` computes it."""
    line = f"observe {_q(' '.join(op.keys))} {shlex.join(op.read)}"
    return line + (f"; member {_q(op.entry)}" if op.entry is not None else "")


def shell_effect(op: Operation) -> str:
    """The effect for the value in $want (``Operation.effect``)."""
    if op.entry is None:
        return f"effect {shlex.join(op.command)} $want"
    return (
        f"case $want in {PRESENT}) effect {shlex.join(op.add)} ;; "
        f"*) effect {shlex.join(op.remove)} ;; esac"
    )


def _shell_want(port: str, target: Target) -> str:
    if target.want is not None:
        return f"want={_q(target.want)}"
    line = f"want=$(captured {_q(port)} {_q(target.op.name)})"
    if target.firmware_skips:
        line += f'; [ "$(captured {_q(port)} lldp)" != {_q(FIRMWARE_OWNED)} ] || want='
    return line


def shell_converge(port: str, targets: list[Target]) -> list[str]:
    """``converge`` as shell lines (a rollback's targets read $CAPTURE through ``captured``)."""
    lines = []
    for target in targets:
        lines.append(f"# {port}: {target.op.what}")
        lines.append(_shell_want(port, target))
        condition = '[ "$value" != "$want" ]'
        if target.want is None:
            condition = '[ -n "$want" ] && ' + condition
        if target.only is not None:
            condition = f'[ "$want" = {target.only} ] && ' + condition
        lines.append(shell_observe(target.op))
        lines.append(f"if {condition}; then {shell_effect(target.op)}; fi")
    return lines


def shell_pending(port: str, targets: list[Target]) -> list[str]:
    """``pending`` as the body of a shell function: prints what differs and returns 1."""
    lines = []
    for target in finals(targets):
        lines.append(_shell_want(port, target))
        lines.append(shell_observe(target.op))
        lines.append(
            '{ [ -z "$want" ] || [ "$value" = "$want" ]; } || '
            f'{{ echo "{port}: {target.op.what}: $value, not $want"; return 1; }}'
        )
    return lines


def shell_capture(site: Site, port: str) -> list[str]:
    """``capture`` as shell lines: each value appended to $capture as PORT<tab>NAME<tab>VALUE."""
    lines = []
    for op in operations(site, port):
        lines.append(shell_observe(op))
        lines.append(f"keep {_q(port)} {_q(op.name)}")
    return lines


def shell_capture_gaps(site: Site, port: str) -> list[str]:
    """``capture_gaps`` as shell lines: each missing value appended to $gaps."""
    return [
        f'[ -n "$(captured {_q(port)} {_q(op.name)})" ] || gaps="$gaps; {port}: {op.what}"'
        for op in operations(site, port)
    ]


def shell_firmware_owned(port: str) -> str:
    """The condition of ``_firmware_owned`` in shell."""
    return (
        f'[ "$(captured {_q(port)} lldp)" = {_q(FIRMWARE_OWNED)} ] && '
        f'{{ {shell_observe(lldp(port))}; [ "$value" = {_q(FIRMWARE_OWNED)} ]; }}'
    )


def capture_text(values: dict[str, dict[str, str]], tos: str | None) -> str:
    """A capture as the scripts keep it (``keep``): one PORT<tab>NAME<tab>VALUE a line."""
    lines = [
        f"{port}\t{name}\t{value}" for port, ops in values.items() for name, value in ops.items()
    ]
    if tos is not None:
        lines.append(f"-\ttos\t{tos}")
    lines.append("-\tcomplete\tyes")  # the scripts keep a capture whole or not at all
    return "".join(f"{line}\n" for line in lines)


def parse_capture(text: str) -> tuple[dict[str, dict[str, str]], str | None]:
    """The inverse of ``capture_text`` (lines it does not recognise are skipped)."""
    values: dict[str, dict[str, str]] = {}
    tos = None
    for line in text.splitlines():
        parts = line.split("\t", 2)
        if len(parts) != 3:
            continue
        port, name, value = parts
        if port == "-":
            tos = value if name == "tos" else tos
        else:
            values.setdefault(port, {})[name] = value
    return values, tos


# -- the runbook ---------------------------------------------------------------------------


def runbook_lines(port: str, targets: list[Target], show: Callable[..., str]) -> list[str]:
    """Each effect with its guard, as the runbook shows a command that runs only sometimes."""
    lines = []
    for target in targets:
        if target.want is None:
            continue
        op, read = target.op, shlex.join(target.op.read)
        if op.entry is None:
            note = f"unless `{read}` shows {target.want}"
        elif target.want == PRESENT:
            note = f"unless `{read}` lists {op.entry}"
        else:
            note = f"only when `{read}` lists {op.entry}"
        lines.append(show(op.effect(target.want), note))
    return lines
