"""The Ansible play's window is rendered from the one definition, not written beside it
(#24): its drain and uncordon are wizard/drain.py's commands with the play's kubectl, and
its "QoS already in place" guard is the exported change script's own check
(`apply-qos.sh --check`: the operations of steps/qos/operations.py and their values). So
a change of the definition changes what the play does: shown here by deliberately wrong
changes (a drain timeout, an operation's wanted value) that the play follows."""

from __future__ import annotations

import shlex

import yaml

from steps import ansible as ansible_export
from steps.ansible import ansible_artifacts, kubectl
from steps.qos import operations, procedure
from tests.test_host_scripts import WANTED, _qos, _site, lab_host  # noqa: F401  (a fixture)
from wizard import drain


def _files(site) -> dict[str, str]:
    return {a.path: a.content for a in ansible_artifacts(site)}


def _window_tasks(site) -> dict[str, dict]:
    """The QoS play's tasks by name, the window block's included."""
    plays = yaml.safe_load(_files(site)["ansible/site.yml"])
    tasks: dict[str, dict] = {}
    for play in plays:
        for task in play.get("tasks", []):
            tasks[task["name"]] = task
            for inner in task.get("block", []) + task.get("rescue", []):
                tasks[inner["name"]] = inner
    return tasks


def test_the_plays_drain_and_uncordon_are_drain_py_s_commands(monkeypatch):
    site = _site("rhel-10.2")
    tasks = _window_tasks(site)
    node = ansible_export.PLAY_NODE
    drained = tasks["Cordon and drain the node"]["ansible.builtin.command"].strip()
    assert shlex.split(drained) == drain.drain_command(node, kubectl=kubectl(site))
    uncordon = tasks["Uncordon the node"]["ansible.builtin.command"].strip()
    assert shlex.split(uncordon) == drain.uncordon_command(node, kubectl=kubectl(site))
    # A deliberately different definition: the play's drain follows it.
    monkeypatch.setattr(drain, "DRAIN_TIMEOUT_S", 1234)
    drained = _window_tasks(site)["Cordon and drain the node"]["ansible.builtin.command"]
    assert "--timeout=1234s" in shlex.split(drained)


async def test_the_plays_qos_guard_is_the_change_scripts_check_and_follows_the_definition(
    lab_host,  # noqa: F811  (the fixture imported above)
    monkeypatch,
):
    shell, host = lab_host
    site = _site(host.state.os)
    node = site.nodes[0]
    script = f"ansible/files/{node.name}/apply-qos.sh"
    guard = _window_tasks(site)["Decide whether the QoS is already in place (apply-qos.sh --check)"]
    run = shlex.split(
        guard["ansible.builtin.script"].replace("{{ inventory_hostname }}", node.name)
    )
    assert run == [script.removeprefix("ansible/"), "--check"]
    assert _files(site)[script] == procedure(site, node)

    async def check() -> int:
        result = await shell.run(host, _files(site)[script], "--check")
        assert result.exit_status in (0, 1), result.stderr
        return result.exit_status

    assert await check() == 1  # a fresh node: the play opens its window
    before = _qos(host)
    assert (await shell.run(host, procedure(site, node))).exit_status == 0
    assert _qos(host) == WANTED != before
    assert await check() == 0  # in place: no drain, no bond down
    # A deliberately different definition (the LLDP agent wanted on): the play's guard
    # follows it and takes the window again, though nothing on the node changed.
    original = operations.apply_targets

    def lldp_on(site, port):
        targets = original(site, port)
        return [
            operations.Target(t.op, "fw-lldp-agent on") if t.op.name == "lldp" else t
            for t in targets
        ]

    monkeypatch.setattr(operations, "apply_targets", lldp_on)
    import steps.qos.commands as commands

    monkeypatch.setattr(commands, "apply_targets", lldp_on)
    assert await check() == 1
