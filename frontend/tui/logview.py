"""The live log: a Log that follows new output unless the operator scrolled up, and the
full-screen log view (``l``) with a search that keeps only the matching lines.

Textual's ``Log`` follows only while its scroll position is exactly at the end when a
write arrives. A burst written before the widget had its size, or the log shrinking as
the panes above it grow, leaves it short of the end, and from then on it never follows
again: the operator saw the first preflight lines for the whole run. Here following is
the operator's choice instead: scrolling up stops it, scrolling back to the end (or
``end``) resumes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Label, Log

REFRESH_S = 0.5  # how often the full-screen view takes in the lines written since


class FollowLog(Log):
    """A Log that keeps showing the newest line until the operator scrolls up."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, auto_scroll=False, **kwargs)
        self.follow = True

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> FollowLog:
        super().write_lines(lines, scroll_end=False)
        if self.follow if scroll_end is None else scroll_end:
            # After the refresh: the new virtual size is known by then, so the end is the end.
            self.call_after_refresh(self._to_end)
        return self

    def _to_end(self) -> None:
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def on_resize(self, event: events.Resize) -> None:
        # The log shrinks when the panes above it grow (a finding's detail, the error
        # panel): the end moves down without a write, and a follower goes with it.
        if self.follow:
            self.call_after_refresh(self._to_end)

    def _stop_following(self) -> None:
        self.follow = False

    def _follow_if_at_end(self) -> None:
        self.follow = self.is_vertical_scroll_end

    # The operator's own scrolling decides; a programmatic scroll does not.
    def action_scroll_up(self) -> None:
        super().action_scroll_up()
        self._stop_following()

    def action_page_up(self) -> None:
        super().action_page_up()
        self._stop_following()

    def action_scroll_home(self) -> None:
        super().action_scroll_home()
        self._stop_following()

    def action_scroll_down(self) -> None:
        super().action_scroll_down()
        self.call_after_refresh(self._follow_if_at_end)

    def action_page_down(self) -> None:
        super().action_page_down()
        self.call_after_refresh(self._follow_if_at_end)

    def action_scroll_end(self) -> None:
        self.follow = True
        super().action_scroll_end()

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        super()._on_mouse_scroll_up(event)
        self._stop_following()

    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        super()._on_mouse_scroll_down(event)
        self.call_after_refresh(self._follow_if_at_end)


def matching(lines: Iterable[str], query: str) -> list[str]:
    """The lines that contain ``query`` (case-insensitive); every line for an empty query."""
    needle = query.strip().casefold()
    if not needle:
        return list(lines)
    return [line for line in lines if needle in line.casefold()]


class LogScreen(Screen[None]):
    """Every command and its output so far, full screen, still growing; ``/`` searches."""

    BINDINGS = [
        Binding("escape,l", "back", "Back"),
        Binding("slash", "search", "Search"),
        Binding("end", "follow", "Follow"),
        Binding("question_mark", "app.help", "Help"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, transcript: list[str]) -> None:
        super().__init__()
        # The main screen's transcript (the same list: it grows while this screen is open).
        self.transcript = transcript
        self.query_text = ""
        self._seen = 0  # transcript lines taken in so far
        self._shown = 0  # of them, lines that matched the query

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Input(placeholder="search the log: only matching lines are shown", id="log-search")
        yield Label("", id="log-count")
        yield FollowLog(id="full-log", max_lines=200_000)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "log"
        self._reload()
        self.query_one("#full-log", FollowLog).focus()
        self.set_interval(REFRESH_S, self.take_in)

    def _reload(self) -> None:
        log = self.query_one("#full-log", FollowLog)
        log.clear()
        self._seen = len(self.transcript)
        lines = matching(self.transcript[: self._seen], self.query_text)
        self._shown = len(lines)
        log.follow = True
        log.write_lines(lines)
        self._count()

    def take_in(self) -> None:
        """The lines written since the last look (filtered by the search)."""
        end = len(self.transcript)
        if end == self._seen:
            return
        lines = matching(self.transcript[self._seen : end], self.query_text)
        self._seen = end
        if lines:
            self._shown += len(lines)
            self.query_one("#full-log", FollowLog).write_lines(lines)
        self._count()

    def _count(self) -> None:
        what = f"{self._shown} of {self._seen} lines"
        if self.query_text.strip():
            what += f" contain {self.query_text.strip()!r}"
        self.query_one("#log-count", Label).update(what)

    @on(Input.Changed, "#log-search")
    def searched(self, event: Input.Changed) -> None:
        self.query_text = event.value
        self._reload()

    @on(Input.Submitted, "#log-search")
    def submitted(self) -> None:
        self.query_one("#full-log", FollowLog).focus()

    def action_search(self) -> None:
        self.query_one("#log-search", Input).focus()

    def action_follow(self) -> None:
        self.query_one("#full-log", FollowLog).action_scroll_end()

    def action_back(self) -> None:
        self.app.pop_screen()
