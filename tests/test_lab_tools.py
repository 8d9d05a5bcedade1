"""The lab's tools registered for a Command (``@lab_tool``, simulator/host/dispatch.py):
each answers the very command line its Command declares, with output the Command's parser
reads, and no program has a second handler in the host model."""

from __future__ import annotations

from simulator.host import LabHost
from simulator.host.dispatch import LAB_TOOLS, _method


def test_every_registered_command_is_answered_in_a_form_its_parser_reads():
    host = LabHost("gpu-1", "gpu", "10.10.0.21", "192.168.50.21")
    assert LAB_TOOLS, "no lab tool is registered for a Command"
    for program, (command, _) in LAB_TOOLS.items():
        assert command.tool == program
        result = host.execute(command.text)
        assert result.exit_status == 0, (command.text, result.stderr)
        command.parse(result.stdout)  # raises ParseError when the lab's answer is not it


def test_no_program_has_two_handlers():
    assert not [p for p in LAB_TOOLS for kind in LabHost.ANSWERING if hasattr(kind, _method(p))]
    handlers = [n for kind in LabHost.ANSWERING for n in dir(kind) if n.startswith("cmd_")]
    assert len(handlers) == len(set(handlers))  # the host's collaborators: one subject each


def test_dispatch_asks_the_collaborators_the_lab_shell_lists():
    """The lab shell puts the programs of ``LabHost.ANSWERING`` on its PATH (shell.py):
    the dispatch of a host asks those very collaborators."""
    host = LabHost("gpu-1", "gpu", "10.10.0.21", "192.168.50.21")
    assert tuple(type(c) for c in host.dispatch.answering) == LabHost.ANSWERING


def test_a_step_and_the_lab_share_the_containerd_command():
    """The preflight check runs the object the lab is keyed by (not a second spelling)."""
    from steps.preflight import CONTAINERD_READ
    from wizard.facts.system import CONTAINERD_VERSION

    assert LAB_TOOLS["containerd"][0] is CONTAINERD_VERSION
    assert CONTAINERD_READ.command == list(CONTAINERD_VERSION.argv)
    assert CONTAINERD_READ.kind == CONTAINERD_VERSION.kind == "containerd-version"
