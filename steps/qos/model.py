"""The QoS of one E810 port, as wanted and as read back, in one form for the diff."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import yaml

from wizard.facts.dcb import DcbApp, DcbEts, DcbPfc
from wizard.site import Site


@dataclass(frozen=True)
class PortQos:
    """The QoS state of one port (firmware LLDP agent, PFC, DSCP map, ETS)."""

    lldp_agent: bool | None
    pfc: tuple[int, ...]
    dscp_prio: tuple[tuple[int, int], ...]
    prio_tc: tuple[int, ...] | None
    tc_bw: tuple[int, ...] | None = None

    def render(self) -> str:
        return yaml.safe_dump(self._fields(), sort_keys=False)

    def differences(self, wanted: PortQos) -> list[str]:
        """Each field that differs from ``wanted``, as "field: expected X, found Y" (what a
        failed verification names, rather than the whole state read back)."""
        want, have = wanted._fields(), self._fields()
        return [
            f"{key}: expected {_shown(want[key])}, found {_shown(have[key])}"
            for key in want
            if want[key] != have[key]
        ]

    def _fields(self) -> dict[str, Any]:
        return {
            "fw-lldp-agent": None
            if self.lldp_agent is None
            else ("on" if self.lldp_agent else "off"),
            "pfc-on-priorities": list(self.pfc),
            "dscp-prio": [f"{d}:{p}" for d, p in self.dscp_prio],
            "prio-tc": None if self.prio_tc is None else _pairs(self.prio_tc),
            "tc-bw": None if self.tc_bw is None else _pairs(self.tc_bw),
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PortQos:
        return cls(
            data.get("lldp_agent"),
            tuple(data.get("pfc", ())),
            tuple(tuple(x) for x in data.get("dscp_prio", ())),  # type: ignore[misc]
            None if data.get("prio_tc") is None else tuple(data["prio_tc"]),
            None if data.get("tc_bw") is None else tuple(data["tc_bw"]),
        )


def _shown(value: Any) -> str:
    if value is None:
        return "nothing (unreadable)"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _pairs(values: tuple[int, ...]) -> str:
    return " ".join(f"{i}:{v}" for i, v in enumerate(values))


# What an untouched E810 port reports (ice's software default, ice_dcb_sw_dflt_cfg):
# firmware LLDP on, no PFC, no DSCP entries, every priority on TC0 with 100 %.
FACTORY = PortQos(True, (), (), (0,) * 8, (100,) + (0,) * 7)


def desired_bandwidth(site: Site) -> tuple[int, ...]:
    """ETS shares per TC: the RoCE TC its configured share, TC0 the rest, others 0. In DSCP
    mode priority n is TC n, so the RoCE TC is the RoCE priority."""
    qos = site.qos
    bw = [0] * 8
    bw[0] = 100 - qos.roce_bandwidth_percent if qos.priority != 0 else 100
    if qos.priority != 0:
        bw[qos.priority] = qos.roce_bandwidth_percent
    return tuple(bw)


def desired_port(site: Site) -> PortQos:
    """In DSCP mode the E810 maps priority 1:1 to TC (ice_dcbnl_setapp), so that is what it
    reads back; ETS carries the bandwidth shares."""
    qos = site.qos
    return PortQos(
        False,
        tuple(sorted(qos.pfc_priorities)),
        ((qos.dscp, qos.priority),),
        tuple(range(8)),
        desired_bandwidth(site),
    )


def live_port(
    pfc: DcbPfc | None, app: DcbApp | None, ets: DcbEts | None, lldp: bool | None
) -> PortQos:
    def indexed(values: dict[str, int] | None) -> tuple[int, ...] | None:
        if not values or len(values) != 8:
            return None
        return tuple(int(values[str(i)]) for i in range(8))

    return PortQos(
        lldp,
        tuple(pfc.enabled()) if pfc else (),
        tuple(sorted((d, p) for d, p in app.dscp_prio)) if app else (),
        indexed(ets.prio_tc) if ets else None,
        indexed(ets.tc_bw) if ets else None,
    )
