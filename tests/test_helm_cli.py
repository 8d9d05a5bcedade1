"""`helm get values` output that is not a release's values is a HelmError (issue #18)."""

from __future__ import annotations

import pytest

from wizard.transports.helm import HelmCli, HelmError


def fake_helm(tmp_path, stdout: str):
    helm = tmp_path / "helm"
    (tmp_path / "out").write_text(stdout)
    helm.write_text(f"#!/bin/sh\ncat {tmp_path / 'out'}\n")
    helm.chmod(0o755)
    return HelmCli(str(helm), str(tmp_path / "kubeconfig"))


@pytest.mark.parametrize(
    ("stdout", "says"),
    [
        ("Error: this is not JSON {\n", "printed no JSON object"),
        ('["a", "list"]', "printed no JSON object"),
        ('{"a": ' * 5000, "nested too deeply"),
        ('{"a": 1, ', "not YAML or JSON"),
        ("<html>502 Bad Gateway</html>", "printed no JSON object"),
    ],
)
async def test_non_values_output_is_a_helm_error(tmp_path, stdout, says):
    with pytest.raises(HelmError, match=says):
        await fake_helm(tmp_path, stdout).get_values("gpu-operator", "gpu-operator")


async def test_values_null_and_json_are_read(tmp_path):
    assert await fake_helm(tmp_path, "null\n").get_values("r", "n") == {}
    assert await fake_helm(tmp_path, '{"driver": {"enabled": true}}').get_values("r", "n") == {
        "driver": {"enabled": True}
    }


async def test_a_helm_that_cannot_run_is_a_helm_error(tmp_path):
    helm = tmp_path / "helm"
    helm.write_bytes(b"\x7fELF not really")  # executable bit, but no program
    helm.chmod(0o755)
    with pytest.raises(HelmError, match="cannot run helm"):
        await HelmCli(str(helm), str(tmp_path / "kubeconfig")).version()
