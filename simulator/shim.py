"""The executables on a lab host's PATH: one small program, linked under every tool name
(``dcb``, ``ip``, ``rdma``, ``cat``, ``tee`` ...), that hands its argv (and, when the tool
reads it, its stdin) to the lab process over a Unix socket and gives back the simulated
host's stdout, stderr and exit status (simulator/shell.py answers it).

It is C, compiled once per source version with the machine's ``cc`` into a private cache
folder: a Python stand-in costs ~25 ms of CPU per call (interpreter start), which a
fleet's batch probes multiply by thousands; the C one costs about 1 ms (numbers in
benchmarks/RESULTS.md and the commit that added it). Without ``cc`` the same protocol is
spoken by a Python stand-in (slower, same answers).

The protocol, all on one connection:
  shim -> lab:  ``ARGC\\0HOST\\0NAME\\0ARG1\\0...`` (NUL-terminated; argv has no NULs)
  lab -> shim:  ``I`` (send your stdin, then EOF) or ``N`` (EOF at once: the tool does not
                read stdin, so a script fed on stdin, ``sh -s < script``, is not eaten),
                or ``R/usr/bin/TOOL\\0``: exec that program instead (the machine's own,
                acting on the host's filesystem view: simulator/rootfs.py)
  lab -> shim:  ``EXIT OUTLEN ERRLEN\\n`` then OUTLEN bytes of stdout, ERRLEN of stderr
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RUNAS = ".gnw-runas"  # the shim's other name: the lab's launcher that drops to nobody

C_SOURCE = r"""
#define RUNAS ".gnw-runas"
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "lab shim: %s: %s\n", what, strerror(errno));
    exit(127);
}

static void put(int fd, const char *buf, size_t n) {
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) { if (errno == EINTR) continue; die("write"); }
        buf += w; n -= (size_t)w;
    }
}

static void copy(int from, int to, long n) {
    char buf[65536];
    while (n > 0) {
        ssize_t r = read(from, buf, n < (long)sizeof buf ? (size_t)n : sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("read");
        put(to, buf, (size_t)r);
        n -= r;
    }
}

int main(int argc, char **argv) {
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    if (strcmp(base, RUNAS) == 0) {
        /* The lab's launcher: drop to nobody, then exec the shell (cheaper than a fork of
           the lab's big process, which Python's subprocess needs for user=). */
        if (argc < 2) return 127;
        if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) die("drop to nobody");
        execv(argv[1], argv + 1);
        die("exec");
    }
    const char *path = getenv("GNW_LAB_SOCKET"), *host = getenv("GNW_LAB_HOST");
    if (!path || !host) { fputs("lab shim: GNW_LAB_SOCKET/GNW_LAB_HOST unset\n", stderr); return 127; }
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr.sun_path) { fputs("lab shim: socket path too long\n", stderr); return 127; }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    char count[32];
    int n = snprintf(count, sizeof count, "%d", argc);
    put(fd, count, (size_t)n + 1);
    put(fd, host, strlen(host) + 1);
    const char *name = strrchr(argv[0], '/');
    name = name ? name + 1 : argv[0];
    put(fd, name, strlen(name) + 1);
    for (int i = 1; i < argc; i++) put(fd, argv[i], strlen(argv[i]) + 1);
    char want;
    if (read(fd, &want, 1) != 1) die("read");
    if (want == 'R') {
        /* The lab: the machine's own program acts on this call (the host's view). */
        char real[4096];
        size_t r = 0;
        while (r < sizeof real - 1) {
            if (read(fd, real + r, 1) != 1) die("read");
            if (real[r] == 0) break;
            r++;
        }
        real[r] = 0;
        close(fd);
        argv[0] = real;
        execv(real, argv);
        die("exec");
    }
    if (want == 'I') {
        char buf[65536];
        ssize_t r;
        while ((r = read(0, buf, sizeof buf)) != 0) {
            if (r < 0) { if (errno == EINTR) continue; break; }
            put(fd, buf, (size_t)r);
        }
    }
    shutdown(fd, SHUT_WR);
    char head[96];
    size_t h = 0;
    while (h < sizeof head - 1) {
        ssize_t r = read(fd, head + h, 1);
        if (r <= 0) die("read");
        if (head[h++] == '\n') break;
    }
    head[h] = 0;
    int status;
    long out, err;
    if (sscanf(head, "%d %ld %ld", &status, &out, &err) != 3) { fputs("lab shim: bad answer\n", stderr); return 127; }
    copy(fd, 1, out);
    copy(fd, 2, err);
    return status;
}
"""

PY_SOURCE = """#!{python}
# gpu-node-wizard lab: the simulated host answers this command (simulator/shim.py).
import os, socket, sys
conn = socket.socket(socket.AF_UNIX)
conn.connect(os.environ["GNW_LAB_SOCKET"])
parts = [str(len(sys.argv)), os.environ["GNW_LAB_HOST"], os.path.basename(sys.argv[0]),
         *sys.argv[1:]]
conn.sendall(b"".join(os.fsencode(p) + b"\\0" for p in parts))
want = conn.recv(1)
if want == b"R":
    real = b""
    while not real.endswith(b"\\0"):
        real += conn.recv(1)
    os.execv(real[:-1], [real[:-1], *sys.argv[1:]])
if want == b"I":
    conn.sendall(sys.stdin.buffer.read())
conn.shutdown(socket.SHUT_WR)
answer = b""
while b"\\n" not in answer:
    chunk = conn.recv(65536)
    if not chunk:
        sys.exit(127)
    answer += chunk
head, _, rest = answer.partition(b"\\n")
status, out, err = (int(x) for x in head.split())
while len(rest) < out + err:
    chunk = conn.recv(65536)
    if not chunk:
        break
    rest += chunk
sys.stdout.buffer.write(rest[:out])
sys.stdout.flush()
sys.stderr.buffer.write(rest[out:out + err])
sys.exit(status)
"""


def _cache_folder() -> Path:
    """A folder of this user's own under the temp folder (checked: ours, not writable by
    others), so a shared /tmp cannot hand us someone else's program."""
    folder = Path(tempfile.gettempdir()) / f"gnw-lab-shim-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not folder.is_dir() or folder.is_symlink() or info.st_uid != os.getuid():
        raise RuntimeError(f"{folder} is not this user's own folder")
    if info.st_mode & 0o022:
        os.chmod(folder, 0o700)
    return folder


def compiled_shim() -> Path | None:
    """The C shim for this source, compiled once (None without a C compiler or when the
    compile fails: the caller falls back to the Python stand-in)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    digest = hashlib.sha256(C_SOURCE.encode()).hexdigest()[:16]
    try:
        folder = _cache_folder()
    except (OSError, RuntimeError):
        return None
    binary = folder / f"shim-{digest}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    source = folder / f"shim-{digest}.c"
    source.write_text(C_SOURCE)
    partial = folder / f"shim-{digest}.{os.getpid()}.tmp"
    try:
        subprocess.run([cc, "-O2", "-o", str(partial), str(source)], check=True,
                       capture_output=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        partial.unlink(missing_ok=True)
        return None
    os.chmod(partial, 0o755)
    os.replace(partial, binary)  # atomic: another lab compiling at once gets a whole file
    return binary


def python_for_shims() -> str:
    """An interpreter that the shell can run even as ``nobody`` (a virtual environment
    under /root is out of its reach); the stand-in needs only the standard library."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def install_shims(bin_dir: Path, names: set[str]) -> str:
    """Put one executable per tool name into ``bin_dir``; returns which kind ("c" or
    "python"). The C shim is copied once and hard-linked under every name."""
    binary = compiled_shim() if os.environ.get("GNW_LAB_SHIM") != "python" else None
    if binary is not None:
        first = bin_dir / ".gnw-shim"
        shutil.copy2(binary, first)
        os.chmod(first, 0o755)
        for name in sorted({*names, RUNAS}):
            os.link(first, bin_dir / name)
        return "c"
    text = PY_SOURCE.format(python=python_for_shims())
    for name in sorted(names):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return "python"
