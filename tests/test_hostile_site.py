"""Site files that used to hang, exhaust memory, crash or silently surprise (issue #18):
each is now a specific refusal, quickly, naming the field or the line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import MINIMAL_SITE, REPO
from wizard.errors import SiteError
from wizard.site import load_site, parse_site


def problems(text: str) -> list[str]:
    with pytest.raises(SiteError) as info:
        parse_site(text)
    return info.value.problems


def test_an_alias_bomb_is_refused_at_once():
    bomb = "a: &a ['x','x','x','x','x','x','x','x','x']\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
        for i in range(9)
    )
    started = time.monotonic()
    [message] = problems(MINIMAL_SITE + "labels:\n  x: 1\n" + bomb.replace("\n", "\n", 1))
    assert "alias (*a) is not allowed" in message
    assert time.monotonic() - started < 1


def test_deep_nesting_is_refused_without_a_recursion_error():
    [message] = problems("name: lab\nx: " + "[" * 1000 + "]" * 1000 + "\n")
    assert "nesting deeper than" in message


def test_a_duplicate_key_is_refused_naming_both_lines():
    text = MINIMAL_SITE + "qos:\n  dscp: 24\n  dscp: 26\n"
    [message] = problems(text)
    lines = text.splitlines()
    first, second = (i + 1 for i, line in enumerate(lines) if "dscp:" in line)
    assert f"duplicate key 'dscp' (first at line {first}, again at line {second})" in message


@pytest.mark.parametrize(
    ("field", "value"), [("priority", "true"), ("dscp", '"24"'), ("ecn", '"yes"')]
)
def test_values_are_not_coerced(field, value):
    [message] = problems(MINIMAL_SITE + f"qos: {{{field}: {value}}}\n")
    assert message.startswith(f"qos.{field}: ")


def test_a_huge_bad_value_is_quoted_only_by_a_short_prefix():
    [message] = problems(MINIMAL_SITE + f"qos: {{dscp: '{'9' * 10_000_000}'}}\n")
    assert len(message) < 300


def test_a_password_put_in_password_env_is_never_echoed():
    secret = "Hunter2-s3cr3t!"
    messages = problems(
        MINIMAL_SITE + f"registry: {{username_env: NEXUS_USER, password_env: '{secret}'}}\n"
    )
    assert messages and all(secret not in m for m in messages)
    assert any(
        "registry.password_env: must be the name of an environment variable" in m for m in messages
    )


def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "site.yaml"
    os.mkfifo(fifo)
    result: list[BaseException] = []
    thread = threading.Thread(target=lambda: result.append(_error(fifo)), daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "load_site hung on a FIFO"
    assert "not a regular file" in str(result[0])


@pytest.mark.parametrize("path", ["/dev/zero", "/"])
def test_devices_and_folders_are_refused(path):
    assert "is " in str(_error(Path(path)))


def test_an_oversized_file_is_refused(tmp_path):
    big = tmp_path / "site.yaml"
    big.write_text(MINIMAL_SITE + "#" * (2 << 20) + "\n")
    assert "larger than 1024 KiB" in str(_error(big))


def test_every_such_file_is_exit_2_and_no_traceback_on_the_command_line(tmp_path):
    cases = {
        "dup.yaml": MINIMAL_SITE + "qos:\n  dscp: 24\n  dscp: 26\n",
        "bin.yaml": bytes(range(256)),
        "nest.yaml": "x: " + "[" * 1000 + "\n",
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        done = subprocess.run([sys.executable, "-m", "frontend.cli", "check", str(path)],
                              cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2, (name, done.stderr)
        assert "Traceback" not in done.stderr and "is not valid" in done.stderr, done.stderr


def _error(path: Path) -> SiteError:
    with pytest.raises(SiteError) as info:
        load_site(path)
    return info.value
