"""The batch wire format: the real script run by a real sh, and the lab's imitation of it."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from simulator.host import LabHost
from wizard.transports.batch import (
    BatchFormatError,
    BatchPart,
    batch_command,
    decode_batch_output,
    encode_batch_output,
)

COMMANDS = [
    "printf 'a\\nb'",
    "printf 'err\\n' >&2; exit 7",
    "printf '\\000\\001\\377binary'",
    "printf 'GNW-BATCH 9 9 9 9\\n'",
    "",
]


def _real_sh(commands: list[str]) -> bytes:
    return subprocess.run(batch_command(commands), capture_output=True, check=True).stdout


def test_real_sh_output_splits_into_each_commands_result():
    parts = decode_batch_output(_real_sh(COMMANDS))
    assert [(p.index, p.exit_status) for p in parts] == [(0, 0), (1, 7), (2, 0), (3, 0), (4, 0)]
    assert parts[0].stdout == b"a\nb"
    assert (parts[1].stdout, parts[1].stderr) == (b"", b"err\n")
    assert parts[2].stdout == b"\x00\x01\xffbinary"
    assert parts[3].stdout == b"GNW-BATCH 9 9 9 9\n"
    assert parts[4] == BatchPart(4, 0, b"", b"")


def test_the_encoder_the_lab_uses_prints_what_the_real_script_prints():
    real = _real_sh(COMMANDS)
    assert encode_batch_output(decode_batch_output(real)) == real


def test_cut_off_output_gives_the_complete_parts_only():
    real = _real_sh(COMMANDS)
    for cut in range(len(real)):
        parts = decode_batch_output(real[:cut])
        assert parts == decode_batch_output(real)[: len(parts)]
    assert len(decode_batch_output(real[:-1])) == len(COMMANDS) - 1  # the last header cut short


@pytest.mark.parametrize(
    "data", [b"hello\n", b"GNW-BATCH 0 0 x 0\n", b"GNW-BATCH 1 0 0 0\n", b"GNW-BATCH 0 0\n"]
)
def test_output_in_another_format_is_refused(data):
    with pytest.raises(BatchFormatError):
        decode_batch_output(data)


def test_lab_host_plays_the_shell_for_a_batch():
    host = LabHost("gpu-1", "gpu", "10.10.0.21", "192.168.50.21")
    result = host.execute(shlex.join(batch_command(["uname -m", "sudo -n -- lsmod", "nope"])))
    parts = decode_batch_output(result.stdout.encode())
    assert [p.exit_status for p in parts] == [0, 0, 127]
    assert parts[0].stdout == b"x86_64\n"
    assert parts[1].stdout == host.execute("lsmod").stdout.encode()  # sudo inside the batch
    assert b"irdma" in parts[1].stdout
