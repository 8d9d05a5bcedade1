"""The real GPU Operator v26.7.0 chart, rendered by a real Helm engine, for the tests.

``helm-python-sdk`` binds Helm's own Go SDK (v4) through a C library shipped in its wheel:
the chart's templates, its NFD subchart and Helm's value coalescing run exactly as
``helm template`` would, with no helm binary and no network. The chart is the whole
``deployments/gpu-operator`` tree of NVIDIA/gpu-operator at tag v26.7.0, in
``../shared/refs/charts/`` (see that folder's README).
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REFS

CHART_DIR = REFS / "charts" / "gpu-operator-v26.7.0"


def packaged_chart(tmp: Path, version: str) -> Path:
    """The chart as it is published for ``version``.

    The tag's source tree carries placeholders in Chart.yaml (``version: v1.0.0-devel``,
    ``appVersion: "main-latest"``); the chart operators install with ``--version v26.7.0``
    is that tree packaged with the release's version, and the operator and validator images
    default to ``.Chart.AppVersion`` (templates/clusterpolicy.yaml, `validator.version`).
    """
    if not CHART_DIR.is_dir():
        pytest.skip(f"{CHART_DIR} not available")
    target = tmp / "gpu-operator"
    shutil.copytree(CHART_DIR, target)
    meta = yaml.safe_load((target / "Chart.yaml").read_text())
    meta["version"] = version
    meta["appVersion"] = version
    (target / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return target


def render(chart_dir: Path, values: dict[str, Any], namespace: str = "gpu-operator") -> list[dict]:
    """Every object the chart renders with ``values`` (as ``helm template``), parsed."""
    import helm_python

    chart = helm_python.Chart.load(str(chart_dir))
    manifests = chart.render(values, name="gpu-operator", namespace=namespace, is_install=True)
    objects = []
    for text in manifests.values():
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def one(objects: list[dict], kind: str, name_part: str = "") -> dict:
    found = [
        o for o in objects if o.get("kind") == kind and name_part in o["metadata"].get("name", "")
    ]
    assert len(found) == 1, f"{kind} *{name_part}*: {[o['metadata']['name'] for o in found]}"
    return found[0]


def crd_schema(filename: str, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of one CRD version in the chart's crds/, made strict.

    The API server prunes fields a structural schema does not declare (and ``kubectl apply
    --validate=strict`` rejects them), so a field the wizard sets that the CRD lacks is lost
    on a real cluster: every object schema without ``x-kubernetes-preserve-unknown-fields``
    or ``additionalProperties`` gets ``additionalProperties: false`` here to catch it.
    """
    path = CHART_DIR / "crds" / filename
    if not path.exists():
        pytest.skip(f"{path} not available")
    crd = yaml.safe_load(path.read_text())
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return _strict(copy.deepcopy(served["schema"]["openAPIV3Schema"]))


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


def schema_errors(obj: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Every violation of ``schema`` by ``obj``, as 'path: message'."""
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]


def pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    """(kind/name, pod spec) of every workload object (Deployment, DaemonSet, Job, Pod)."""
    specs = []
    for obj in objects:
        kind = obj.get("kind")
        if kind == "Pod":
            spec = obj["spec"]
        elif kind in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            spec = obj["spec"]["template"]["spec"]
        else:
            continue
        specs.append((f"{kind}/{obj['metadata']['name']}", spec))
    return specs


def container_images(spec: dict[str, Any]) -> list[str]:
    return [c["image"] for c in spec.get("initContainers", []) + spec.get("containers", [])]
