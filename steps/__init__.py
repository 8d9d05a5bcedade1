"""The phases of DOMAIN.md section 3, in order, one module per phase.

``build_plan()`` is the single list the engine, the runbook and the export all read.
"""

from __future__ import annotations

from functools import cache

from steps import (
    aistor,
    baseline,
    bond,
    e810,
    ecn,
    gpu_operator,
    gpudirect,
    host_rdma,
    irdma,
    join,
    nccl,
    operate,
    packages,
    preflight,
    qos,
    rdma_plugin,
)
from wizard.plan import Plan

PHASE_MODULES = (
    preflight,
    packages,
    e810,
    bond,
    irdma,
    host_rdma,
    join,
    gpu_operator,
    rdma_plugin,
    baseline,
    qos,
    ecn,
    gpudirect,
    nccl,
    aistor,
    operate,
)


@cache
def build_plan() -> Plan:
    from steps.ansible import ansible_artifacts
    from steps.mirror import mirror_artifacts

    return Plan(
        tuple(module.PHASE for module in PHASE_MODULES), (ansible_artifacts, mirror_artifacts)
    )
