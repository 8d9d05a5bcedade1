"""A ConfigMap's JSON is reviewed as JSON: one changed field is one diff line, not one
escaped string (the RDMA device plugin's config.json showed as "{\\n  \\"periodic...")."""

from __future__ import annotations

import json

import yaml

from steps.rdma_plugin import configmap
from tests.conftest import MINIMAL_SITE
from wizard.artifacts import k8s_yaml, readable, unified_diff
from wizard.site import parse_site

SITE = parse_site(MINIMAL_SITE)


def test_a_configmap_json_change_is_one_readable_line():
    desired = configmap(SITE, ["ens5f0np0", "ens5f1np1"])
    live = json.loads(json.dumps(desired))
    config = json.loads(live["data"]["config.json"])
    config["configList"][0]["rdmaHcaMax"] = 32
    live["data"]["config.json"] = json.dumps(config)  # compact, as another tool wrote it
    diff = unified_diff(k8s_yaml(live), k8s_yaml(desired), "ConfigMap kube-system/rdma-devices")
    changed = [x for x in diff.splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")]
    assert changed == ['-          "rdmaHcaMax": 32,', '+          "rdmaHcaMax": 64,']
    assert "\\n" not in diff and '\\"' not in diff  # no escaped JSON anywhere


def test_readable_is_only_for_showing_and_keeps_the_object():
    text = k8s_yaml(configmap(SITE, ["ens5f0np0"]))
    shown = readable(text)
    assert shown != text and "  config.json: |\n    {\n" in shown
    before, after = yaml.safe_load(text), yaml.safe_load(shown)
    assert json.loads(before["data"]["config.json"]) == json.loads(after["data"]["config.json"])
    assert after["metadata"] == before["metadata"]
    assert readable("options irdma roce_ena=1\n") == "options irdma roce_ena=1\n"
    assert readable("kind: Secret\ndata: {a: '{}'}\n") == "kind: Secret\ndata: {a: '{}'}\n"
    assert readable("a: [unclosed\n") == "a: [unclosed\n"


def test_a_change_only_in_json_spacing_still_shows_a_diff():
    desired = configmap(SITE, ["ens5f0np0"])
    live = json.loads(json.dumps(desired))
    live["data"]["config.json"] = json.dumps(json.loads(live["data"]["config.json"]))
    diff = unified_diff(k8s_yaml(live), k8s_yaml(desired), "ConfigMap x")
    assert any(x.startswith("+") and not x.startswith("+++") for x in diff.splitlines())
