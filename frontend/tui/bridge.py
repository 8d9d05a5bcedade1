"""Calls from the engine's thread into the UI loop, awaited from the engine's loop.

The TUI runs the engine on an asyncio loop of its own, in a thread (see frontend/tui/app.py). The
engine's loop must never block on the UI and the UI loop must never wait for the engine, so
a call into the UI is a coroutine scheduled on the UI loop (``run_coroutine_threadsafe``)
whose result the engine's loop awaits (``wrap_future``). Cancelling the awaiting task (the
app is quitting) cancels the call on the UI loop too: a modal that was waiting for an
answer is taken down, and the engine sees ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from textual.app import App, ScreenStackError
from textual.screen import Screen

T = TypeVar("T")


class SetAside:
    """What a question's dialog is dismissed with when the operator steps back from it (Esc):
    no answer. The question still waits; ``UiBridge.reopen`` shows it again."""


SET_ASIDE = SetAside()


class UiBridge:
    """Made on the UI loop; used from the engine's loop."""

    def __init__(self, app: App[Any]) -> None:
        self.app = app
        self.loop = asyncio.get_running_loop()
        # Textual finds its app through context variables (active_app...): a call runs in
        # a copy of the context the bridge was made in, not in the engine thread's.
        self.context = contextvars.copy_context()
        # The question set aside with Esc (at most one: the engine asks one at a time), as
        # its title and how to show it again; a callback tells the app when this changes.
        self.waiting: tuple[str, Callable[[], Any]] | None = None
        self.on_waiting: Callable[[], None] | None = None

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function(*args)`` on the UI loop (awaiting it if it is a coroutine)."""

        async def run() -> Any:
            result = function(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        future = self.context.copy().run(asyncio.run_coroutine_threadsafe, run(), self.loop)
        return await asyncio.wrap_future(future)

    async def ask(self, make_screen: Callable[[], Screen[T]]) -> T:
        """Push the screen ``make_screen()`` builds (on the UI loop) and return what it is
        dismissed with."""
        return await self.call(self._push_and_wait, make_screen)

    async def _push_and_wait(self, make_screen: Callable[[], Screen[T]]) -> T:
        answered: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        shown: list[Screen[T]] = []

        def done(result: T | SetAside | None) -> None:
            if answered.done():
                return
            if isinstance(result, SetAside):  # Esc: back to the run, the question waits
                self._set_waiting((str(getattr(shown[-1], "waiting_title", "a question")), show))
                return
            self._set_waiting(None)
            answered.set_result(result)  # type: ignore[arg-type]

        def show() -> Any:
            self._set_waiting(None)
            shown.append(make_screen())
            return self.app.push_screen(shown[-1], callback=done)

        await show()
        try:
            return await answered
        except asyncio.CancelledError:
            # Nobody waits for this answer any more (the run was cancelled): take the
            # question down unless something else sits on top of it by now.
            self._set_waiting(None)
            with contextlib.suppress(ScreenStackError):  # the app is closing: no screens
                if self.app.screen is shown[-1]:
                    shown[-1].dismiss(None)
            raise

    def reopen(self) -> bool:
        """Show the question set aside with Esc again (on the UI loop); False when none waits."""
        if self.waiting is None:
            return False
        _title, show = self.waiting
        self.app.call_later(show)
        return True

    def _set_waiting(self, waiting: tuple[str, Callable[[], Any]] | None) -> None:
        self.waiting = waiting
        if self.on_waiting is not None:
            self.on_waiting()
