"""Issue #28 point 9: a wait shows its progress ("waiting for the RDMA device on bond1, 24
of 60 s"), its repeated poll is logged once, and its end is said, not a screen of the same
command again and again."""

from __future__ import annotations

import io
from types import SimpleNamespace

from textual.widgets import Label

import steps.qos.steps as qos_steps
from frontend.headless import HeadlessFrontEnd
from frontend.tui.main import wait_progress
from tests.conftest import MINIMAL_SITE
from tests.test_tui import SIZE
from tests.test_tui_keys import IdleApp, show
from wizard.events import CommandFinished, CommandStarted, OutputLine, WaitEnded, Waiting
from wizard.site import parse_site

POLL = "rdma link show"


def test_wait_progress_reads_as_so_far_of_at_most():
    assert wait_progress(24.6, 60) == "24 of 60 s"
    assert wait_progress(75, 60) == "60 of 60 s"
    assert wait_progress(187, 900) == "3:07 of 15:00"


def polled(main, now: list[float], rounds: int, commands: tuple[tuple[str, str], ...]) -> None:
    """The main screen told of a 60 s wait for the RDMA device, then ``rounds`` rounds of
    ``commands`` (command, its output line), 2 s apart on the screen's clock ``now``."""
    main.clock = lambda: now[0]
    main.engine_event(Waiting("qos.apply", "gpu-1", "waiting for the RDMA device on bond1", 60))
    for _ in range(rounds):
        for command, line in commands:
            main.engine_event(CommandStarted("gpu-1", command))
            main.engine_event(OutputLine("gpu-1", line))
            main.engine_event(CommandFinished("gpu-1", command, 0, 0.1))
        now[0] += 2


async def test_the_wait_shows_its_progress_logs_its_poll_once_and_says_when_it_ended():
    app = IdleApp()
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, "main")
        main = app.main()
        polled(main, [1000.0], 12, ((POLL, "link irdma0/1 state DOWN"),))
        main._tick()
        label = str(main.query_one("#elapsed", Label).content)
        # The count first: an 80-column line is cut at the right (screen-r3 B7).
        assert label.startswith("⧗ 24 of 60 s: waiting for the RDMA device on bond1"), label
        log = [line.split(" ", 1)[1] for line in main.transcript]
        assert (
            log.count(f"gpu-1$ {POLL}") == 1 and log.count("gpu-1| link irdma0/1 state DOWN") == 1
        )
        main.engine_event(WaitEnded("qos.apply", "gpu-1"))
        main.engine_event(CommandStarted("gpu-1", "cat /sys/class/x"))
        main._tick()
        assert "⧗" not in str(main.query_one("#elapsed", Label).content)
        log = [line.split(" ", 1)[1] for line in main.transcript]
        assert log[-2] == (
            "gpu-1: qos.apply: done waiting for the RDMA device on bond1 after 24.0s; its "
            "command ran 12 times, shown once"
        )
        assert log[-1] == "gpu-1$ cat /sys/class/x"


async def test_a_wait_that_polls_two_commands_in_turn_logs_each_once():
    """The RDMA device and, between, the kernel log (an ice LAG refusal ends the wait)."""
    app = IdleApp()
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, "main")
        main = app.main()
        polled(
            main, [1000.0], 5, ((POLL, "link irdma0/1 state DOWN"), ("dmesg", "[ 9.1] bond1: up"))
        )
        main.engine_event(WaitEnded("qos.apply", "gpu-1"))
        main.engine_event(CommandStarted("gpu-1", "dmesg"))  # after the wait: shown again
        log = [line.split(" ", 1)[1] for line in main.transcript]
        assert log.count(f"gpu-1$ {POLL}") == 1 and log.count("gpu-1| [ 9.1] bond1: up") == 1
        assert log[-2] == (
            "gpu-1: qos.apply: done waiting for the RDMA device on bond1 after 10.0s; its 2 "
            "commands ran 10 times, each shown once"
        )
        assert log[-1] == "gpu-1$ dmesg"


async def test_the_qos_step_says_it_waits_for_the_rdma_device_and_when_the_wait_is_over(
    monkeypatch,
):
    answers = iter([None, None, "irdma0"])

    async def device(ctx, live=False):
        return next(answers)

    async def no_sleep(_):
        return None

    monkeypatch.setattr(qos_steps, "rdma_device", device)
    monkeypatch.setattr(qos_steps.asyncio, "sleep", no_sleep)
    said = []
    site = parse_site(MINIMAL_SITE)
    ctx = SimpleNamespace(
        node=site.nodes[0],
        wait_begins=lambda message, timeout: said.append((message, round(timeout))),
        wait_ends=lambda: said.append("ended"),
    )
    found = await qos_steps.ApplyQos()._device_on_bond(ctx, None)
    assert found.device == "irdma0"
    assert said == [("waiting for the RDMA device on bond1", 60), "ended"]


def test_a_headless_run_prints_the_wait():
    out = io.StringIO()
    HeadlessFrontEnd(out=out).emit(Waiting("qos.apply", "gpu-1", "waiting for LACP", 60))
    assert out.getvalue() == "   gpu-1: waiting for LACP (at most 60 s)\n"
