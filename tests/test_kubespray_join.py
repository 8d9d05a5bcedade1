"""The Kubespray side of the join (v2.29.1): the playbooks that exist in that version, and
the group_vars fragment that keeps the GPU Operator toolkit's containerd drop-in effective
after every later Kubespray run."""

from __future__ import annotations

import tomllib

import yaml

from steps import build_plan
from steps.join import GROUP_VARS_PATH, TOOLKIT_DROP_IN, KubesprayJoin
from tests.conftest import REFS, with_nodes
from wizard.export import export
from wizard.site import parse_site


def fragment(tmp_path) -> dict:
    out = tmp_path / "out"
    export(parse_site(with_nodes(2)), build_plan(), out)
    return yaml.safe_load((out / GROUP_VARS_PATH).read_text())


def test_group_vars_keep_the_toolkit_drop_in_imported(tmp_path):
    values = fragment(tmp_path)
    assert set(values) == {"containerd_extra_args"}
    # Kubespray v2.29.1's config.toml.j2 writes containerd_extra_args literally after the
    # top-level keys (version, root, state, oom_score) and before the first table, so the
    # value must be TOML that sets top-level keys only: here, imports and nothing else.
    parsed = tomllib.loads("version = 3\n" + values["containerd_extra_args"] + "\n[grpc]\n")
    assert set(parsed) == {"version", "imports", "grpc"}
    (pattern,) = parsed["imports"]
    # containerd imports by glob: the toolkit's drop-in must match it.
    directory, _, name = TOOLKIT_DROP_IN.rpartition("/")
    assert pattern == f"{directory}/*.toml" and name.endswith(".toml")


def test_the_sample_inventory_does_not_already_set_it():
    """The v2.29.1 sample (the file operators start from) leaves containerd_extra_args unset,
    so the fragment adds it rather than fighting a default."""
    path = REFS / "kubespray-v2.29.1-inventory-sample-containerd.yml"
    sample = yaml.safe_load(path.read_text()) if path.exists() else None
    assert not (sample or {}).get("containerd_extra_args")


def test_join_commands_use_the_playbooks_of_kubespray_2_29():
    site = parse_site(with_nodes(2))
    facts, scale = KubesprayJoin().commands(site, None)
    assert facts.endswith(" -b playbooks/facts.yml")  # v2.29.1 has no top-level facts.yml
    assert " -b scale.yml --limit=gpu-1,gpu-2" in scale
    assert GROUP_VARS_PATH in KubesprayJoin().instructions(site, None)
