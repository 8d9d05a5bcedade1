"""Reading the operator's YAML safely: bounded size, regular files only, no aliases, no
duplicate keys, bounded nesting.

A site file is small and hand-written. Anything else in its place is a mistake or an
attack, and each gets a specific refusal instead of a hang (a FIFO), memory exhaustion
(``/dev/zero``, an alias "billion laughs" bomb), a RecursionError (1,000-deep nesting), or a
silent surprise (``dscp: 24`` then ``dscp: 26``: the second used to win).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

MAX_BYTES = 1 << 20  # a site file of a thousand nodes is ~300 KB
MAX_DEPTH = 32


class YamlFileError(Exception):
    """One plain sentence about why the file cannot be used."""


def read_text(path: Path, *, max_bytes: int = MAX_BYTES) -> str:
    """The file's text, refusing what is not a small regular UTF-8 file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise YamlFileError("the file does not exist") from None
    except OSError as exc:
        raise YamlFileError(f"cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = (
            "a folder"
            if stat.S_ISDIR(info.st_mode)
            else "not a regular file (a pipe, device or socket)"
        )
        raise YamlFileError(f"is {kind}: give the path of the site file itself")
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise YamlFileError(f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise YamlFileError(f"is larger than {max_bytes // 1024} KiB: a site file never is")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"is not UTF-8 text (byte {exc.start})") from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases and duplicate keys, with a nesting limit."""

    what = "a site file"

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ComposerError(
                None, None, f"an alias (*{event.anchor}) is not allowed in {self.what}",
                event.start_mark,
            )  # fmt: skip
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ComposerError(
                    None,
                    None,
                    f"nesting deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise ConstructorError(
                    None, None, "a key must be a plain value", key_node.start_mark
                ) from None
            if key in seen:
                raise ConstructorError(
                    None, None,
                    f"duplicate key {str(key)[:40]!r} (first at line {seen[key].line + 1}, again at line "
                    f"{key_node.start_mark.line + 1}): say it once",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def loads(text: str, what: str = "a site file") -> Any:
    """Parse YAML text strictly; YamlFileError names the problem and where.

    Also for YAML the wizard reads from elsewhere (``helm get values``): Helm prints plain
    YAML without aliases, so refusing them, duplicates and deep nesting costs nothing there
    and keeps a hostile cluster's output from hanging the run (an alias bomb, ``[`` * 5000).
    """
    loader = type("_Loader", (_StrictLoader,), {"what": what})
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlFileError(f"not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise YamlFileError(f"nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # an integer past Python's 4300-digit conversion limit
        raise YamlFileError(f"a value YAML cannot read: {str(exc)[:120]}") from None
