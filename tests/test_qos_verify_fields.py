"""qos.apply's verification judges the whole QoS of each bond port, not only PFC and the
DSCP map: an ETS share or a firmware LLDP agent that differs from the desired state fails
the port, and a default_roce_tos other than the site's fails the ToS (issue #23: a
verification that ignored ETS and the LLDP agent, and a ToS check that always passed,
broke no test)."""

from __future__ import annotations

import io
from contextlib import asynccontextmanager

from frontend.headless import HeadlessFrontEnd
from simulator.dcb import default_bw
from simulator.lab import Lab
from steps import build_plan
from steps.qos import desired_port
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.engine.runtime import StepRuntime
from wizard.model import Severity
from wizard.services import build_services
from wizard.site import load_site

NODE = "gpu-b300-01"
# The RDMA device on the lab's bond (its RoCE LAG device) and its rdma_cm default ToS.
TOS = "/sys/kernel/config/rdma_cm/irdma0/ports/1/default_roce_tos"


@asynccontextmanager
async def qos_in_place(tmp_path):
    """A lab node whose bond ports hold the desired QoS (as the driver keeps it,
    simulator/dcb.py) and whose RDMA device has the site's ToS; yields the host, its two
    bond ports and ``judged()``: qos.apply's verification, by check."""
    async with Lab(tmp_path / "lab") as lab:
        site = load_site(lab.site_path)
        services = build_services(site)
        host = lab.hosts[NODE]
        wanted = desired_port(site)
        ports = [p for p in host.ports if p.name in site.nodes[0].bond.ports]
        assert len(ports) == 2
        for port in ports:
            port.lldp_agent = False
            port.dcb.pfc = set(wanted.pfc)
            port.dcb.app = list(wanted.dscp_prio)
            port.dcb.prio_tc = list(wanted.prio_tc)
            port.dcb.tc_bw = list(wanted.tc_bw)
            port.dcb.dscp_mode = True
        host.configfs[TOS] = f"{site.qos.roce_tos}\n"
        plan = build_plan()
        step = plan.step("qos.apply")
        try:
            with Checkpoint.open(tmp_path / "state", site) as checkpoint:
                engine = Engine(
                    site, plan, checkpoint, HeadlessFrontEnd(out=io.StringIO()), services
                )

                async def judged() -> dict[str, Severity]:
                    ctx = StepRuntime(site, step, NODE, site.nodes[0], services, engine)
                    return {f.check: f.severity for f in await step.verify(ctx)}

                verdict = await judged()
                names = [f"T08.qos-{p.name}" for p in ports]
                assert all(verdict[n] is Severity.PASS for n in names), verdict
                assert verdict["T08.roce-tos"] is Severity.PASS, verdict
                yield host, ports, names, judged
        finally:
            await services.close()


async def test_qos_verification_judges_ets_and_the_lldp_agent(tmp_path):
    async with qos_in_place(tmp_path) as (_, ports, (first, second), judged):
        ports[1].dcb.tc_bw = default_bw()  # ETS back to TC0 = 100 %, all else right
        verdict = await judged()
        assert verdict[first] is Severity.PASS and verdict[second] is Severity.FAIL, verdict
        ports[1].dcb.tc_bw = list(ports[0].dcb.tc_bw)
        ports[0].lldp_agent = True  # the firmware LLDP agent on again
        verdict = await judged()
        assert verdict[first] is Severity.FAIL and verdict[second] is Severity.PASS, verdict


async def test_tos_verification_fails_a_default_roce_tos_that_is_not_the_sites(tmp_path):
    async with qos_in_place(tmp_path) as (host, _, names, judged):
        host.configfs[TOS] = "0\n"  # the device re-registered: cma's zeroed default
        verdict = await judged()
        assert verdict["T08.roce-tos"] is Severity.FAIL, verdict
        assert all(verdict[n] is Severity.PASS for n in names), verdict


async def test_verification_judges_as_the_change_does_another_dscp_entry_is_not_a_difference(
    tmp_path,
):
    """#24 review host-r2 M1: the change (operations.pending, apply-qos.sh port_differs)
    leaves a port alone that carries another DSCP entry (a storage class 26:3) and would
    do nothing on a rerun; the verification must not fail it (a step that cannot converge)."""
    async with qos_in_place(tmp_path) as (_, ports, names, judged):
        for port in ports:
            port.dcb.app = [*port.dcb.app, (26, 3)]
        verdict = await judged()
        assert all(verdict[n] is Severity.PASS for n in names), verdict
        assert verdict["T08.qos-identical"] is Severity.PASS, verdict


async def test_verification_judges_the_transmission_selection_as_the_change_does(tmp_path):
    """#24 review host-r2 M1: a TC left strict fails the port, as port_differs fails it
    (the verification's own model had no tc-tsa)."""
    async with qos_in_place(tmp_path) as (_, ports, (first, second), judged):
        ports[1].dcb.tc_tsa = ["ets", "ets", "ets", "ets", "ets", "strict", "ets", "ets"]
        verdict = await judged()
        assert verdict[first] is Severity.PASS and verdict[second] is Severity.FAIL, verdict
        assert verdict["T08.qos-identical"] is Severity.FAIL, verdict
