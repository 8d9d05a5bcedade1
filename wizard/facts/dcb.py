"""DCB facts from iproute2's ``dcb``: pfc, ets and app, as text or ``dcb -j`` JSON.

Text output is ``key value`` pairs and ``key i:v i:v ...`` arrays on one or more lines;
JSON output (``dcb -j``) is one object whose arrays are JSON arrays indexed 0..7.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean

# -- DSCP names (RFC 2474 class selectors, RFC 2597 AF, RFC 3246 EF, RFC 5865 VA, RFC 8622 LE)

DSCP_NAMES: dict[str, int] = {
    **{f"CS{n}": 8 * n for n in range(8)},
    **{f"AF{x}{y}": 8 * x + 2 * y for x in range(1, 5) for y in range(1, 4)},
    "EF": 46,
    "VA": 44,
    "LE": 1,
    "DEFAULT": 0,
}


def dscp_value(token: str) -> int:
    """``CS3`` -> 24, ``AF31`` -> 26, ``24`` -> 24, ``0x18`` -> 24; ValueError otherwise."""
    upper = token.strip().upper()
    if upper in DSCP_NAMES:
        return DSCP_NAMES[upper]
    value = int(upper, 16) if upper.startswith("0X") else int(upper)
    if not 0 <= value <= 63:
        raise ValueError(f"DSCP {token!r} is outside 0..63")
    return value


_PAIR = re.compile(r"^(?P<key>[^:\s]+):(?P<value>\S+)$")


def _tokens(text: str) -> list[str]:
    return text.split()


def _json_object(text: str, kind: str) -> dict[str, Any] | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ParseError(kind, f"looks like JSON but does not parse: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ParseError(kind, "JSON is not an object")
    return data


def _scan(text: str, scalars: set[str], arrays: set[str]) -> tuple[dict, dict]:
    """Split dcb text into scalar keys and ``i:v`` arrays, in any line layout."""
    found_scalars: dict[str, str] = {}
    found_arrays: dict[str, list[tuple[str, str]]] = {}
    tokens = _tokens(text)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in scalars and i + 1 < len(tokens):
            found_scalars[token] = tokens[i + 1]
            i += 2
        elif token in arrays:
            pairs = found_arrays.setdefault(token, [])
            i += 1
            while i < len(tokens) and (match := _PAIR.match(tokens[i])):
                pairs.append((match["key"], match["value"]))
                i += 1
        else:
            i += 1
    return found_scalars, found_arrays


def _on_off(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value in ("on", "off"):
        return value == "on"
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# -- pfc


@dataclass
class DcbPfc(Fact):
    prio_pfc: dict[str, bool]
    pfc_cap: int | None
    delay: int | None
    macsec_bypass: bool | None

    def enabled(self) -> list[int]:
        return sorted(int(p) for p, on in self.prio_pfc.items() if on)


@parser("dcb-pfc", "dcb pfc show dev IF")
def parse_dcb_pfc(text: str) -> DcbPfc:
    text = clean(text, "dcb-pfc")
    data = _json_object(text, "dcb-pfc")
    if data is not None:
        prio = data.get("prio_pfc") or []
        return DcbPfc(
            prio_pfc={str(i): bool(v) for i, v in enumerate(prio)},
            pfc_cap=_int(data.get("pfc_cap")),
            delay=_int(data.get("delay")),
            macsec_bypass=_on_off(data.get("macsec_bypass")),
        )
    scalars, arrays = _scan(text, {"pfc-cap", "delay", "macsec-bypass"}, {"prio-pfc"})
    if not scalars and "prio-pfc" not in arrays:
        raise ParseError("dcb-pfc", "no pfc-cap / prio-pfc fields: not `dcb pfc show` output")
    prio_pfc = {}
    for key, value in arrays.get("prio-pfc", []):
        state = _on_off(value)
        if state is None or not key.isdigit():
            raise ParseError("dcb-pfc", f"prio-pfc entry {key}:{value} is not PRIO:on|off")
        prio_pfc[key] = state
    return DcbPfc(
        prio_pfc=prio_pfc,
        pfc_cap=_int(scalars.get("pfc-cap")),
        delay=_int(scalars.get("delay")),
        macsec_bypass=_on_off(scalars.get("macsec-bypass")),
    )


# -- ets


@dataclass
class DcbEts(Fact):
    willing: bool | None
    ets_cap: int | None
    cbs: bool | None
    tc_bw: dict[str, int]
    tc_tsa: dict[str, str]
    prio_tc: dict[str, int]


@parser("dcb-ets", "dcb ets show dev IF")
def parse_dcb_ets(text: str) -> DcbEts:
    text = clean(text, "dcb-ets")
    data = _json_object(text, "dcb-ets")
    if data is not None:
        return DcbEts(
            willing=_on_off(data.get("willing")),
            ets_cap=_int(data.get("ets_cap")),
            cbs=_on_off(data.get("cbs")),
            tc_bw={str(i): int(v) for i, v in enumerate(data.get("tc_bw") or [])},
            tc_tsa={str(i): str(v) for i, v in enumerate(data.get("tc_tsa") or [])},
            prio_tc={str(i): int(v) for i, v in enumerate(data.get("prio_tc") or [])},
        )
    arrays_wanted = {"tc-bw", "tc-tsa", "prio-tc", "pg-bw", "reco-tc-bw", "reco-tc-tsa",
                     "reco-prio-tc"}  # fmt: skip
    scalars, arrays = _scan(text, {"willing", "ets-cap", "cbs"}, arrays_wanted)
    if not scalars and not arrays:
        raise ParseError("dcb-ets", "no ets-cap / tc-bw / tc-tsa / prio-tc fields")

    def numbers(name: str) -> dict[str, int]:
        result = {}
        for key, value in arrays.get(name, []):
            if not (key.isdigit() and value.isdigit()):
                raise ParseError("dcb-ets", f"{name} entry {key}:{value} is not N:N")
            result[key] = int(value)
        return result

    return DcbEts(
        willing=_on_off(scalars.get("willing")),
        ets_cap=_int(scalars.get("ets-cap")),
        cbs=_on_off(scalars.get("cbs")),
        tc_bw=numbers("tc-bw"),
        tc_tsa={k: v for k, v in arrays.get("tc-tsa", [])},
        prio_tc=numbers("prio-tc"),
    )


# -- app

_APP_SELECTORS = ("ethtype-prio", "stream-port-prio", "dgram-port-prio", "port-prio", "pcp-prio")


@dataclass
class DcbApp(Fact):
    dscp_prio: list[list[int]]
    default_prio: list[int] = field(default_factory=list)
    other: dict[str, list[list[str]]] = field(default_factory=dict)

    def priorities_for(self, dscp: int) -> list[int]:
        return [prio for d, prio in self.dscp_prio if d == dscp]


@parser("dcb-app", "dcb app show dev IF [dscp-prio]")
def parse_dcb_app(text: str) -> DcbApp:
    text = clean(text, "dcb-app")
    data = _json_object(text, "dcb-app")
    if data is not None:
        pairs = []
        for entry in data.get("dscp_prio") or []:
            if not isinstance(entry, list) or len(entry) < 2:
                raise ParseError("dcb-app", f"dscp_prio entry {entry!r} is not [dscp, prio]")
            pairs.append([dscp_value(str(entry[0])), int(entry[1])])
        other = {
            key.replace("-", "_"): [
                [str(e[0]), str(e[1])] for e in data.get(key.replace("-", "_"), [])
            ]
            for key in _APP_SELECTORS
            if data.get(key.replace("-", "_"))
        }
        return DcbApp(pairs, [int(p) for p in data.get("default_prio") or []], other)

    tokens = _tokens(text)
    pairs: list[list[int]] = []
    default_prio: list[int] = []
    other: dict[str, list[list[str]]] = {}
    seen = False
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "default-prio":
            seen = True
            while i < len(tokens) and tokens[i].isdigit():
                default_prio.append(int(tokens[i]))
                i += 1
        elif token == "dscp-prio" or token in _APP_SELECTORS:
            seen = True
            while i < len(tokens) and (match := _PAIR.match(tokens[i])):
                i += 1
                if token == "dscp-prio":
                    try:
                        pairs.append([dscp_value(match["key"]), int(match["value"])])
                    except ValueError:
                        raise ParseError(
                            "dcb-app", f"dscp-prio entry {match.group(0)!r} is not DSCP:PRIO"
                        ) from None
                else:
                    other.setdefault(token.replace("-", "_"), []).append(
                        [match["key"], match["value"]]
                    )
    if not seen:
        raise ParseError("dcb-app", "no dscp-prio or other app selector: not `dcb app show`")
    return DcbApp(pairs, default_prio, other)
