"""NCCL as the lab's pods run it: the log and table of all_reduce_perf, for each shape of
run the wizard makes, decided the way NCCL decides.

NCCL tries P2P, then SHM, then NET for every rank pair (src/transport.cc, ``ncclTransports[]``
and ``selectTransport()``); between GPUs of one node NET is allowed only when both GPUs reach
a NIC at PXB or closer and that path is faster than the GPU-to-GPU path
(src/graph/paths.cc, ``ncclTopoCheckNet``). On a B300 node NVLink (NV18) is far faster than
a 100 Gb/s E810, so:

- one node, P2P on: channels via P2P (the NVLink baseline);
- one node, P2P and SHM off: no transport at all, ``NCCL WARN No transport found``;
- two nodes: NET between the nodes, via NET/IB/0/GDRDMA for the GPUs within PXB of the NIC
  (GPU0-3 on the lab's topology), NET/Socket when the ranks see no RDMA device.

Formats follow ../shared/fixtures/nccl-log and nccl-tests (NCCL 2.2x wording).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

NCCL_VERSION = "2.27.5+cuda12.9"
NVLINK_BUSBW = 781.4  # GB/s, all_reduce over 8 x B300 (NVLink 5)
RDMA_BUSBW = 11.6  # GB/s, one 100 Gb/s E810 port between two nodes
SOCKET_BUSBW = 2.1


def _prefix(node: str, pid: int = 412, dev: int = 0) -> str:
    return f"{node}:{pid}:{pid} [{dev}] NCCL INFO"


def _table(busbw: float, ranks: int) -> list[str]:
    lines = [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    factor = 2 * (ranks - 1) / ranks if ranks > 1 else 1.0
    for size in (8, 1048576, 134217728, 1073741824, 17179869184):
        bus = min(busbw, size / 1e9 * 80) if size > 8 else 0.0
        alg = bus / factor if factor else bus
        time_us = max(size / (alg * 1e3) if alg else 24.1, 24.1)
        lines.append(f"{size:>12} {size // 4:>13}     float     sum      -1 {time_us:>8.1f} {alg:>7.2f} {bus:>7.2f}      0 "
                     f"{time_us:>8.1f} {alg:>7.2f} {bus:>7.2f}      0")  # fmt: skip
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {busbw * 0.62:.3f} ", "#"]
    return lines


def _banner(nodes: Sequence[str], gpus: int, per_node: bool) -> list[str]:
    lines = [
        f"# nThread 1 nGpus {gpus if per_node else 1} minBytes 8 maxBytes 17179869184 step: 2(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    rank = 0
    for node in nodes:
        for gpu in range(gpus):
            bus = f"0000:{0x18 + 0x10 * gpu:02x}:00.0"
            lines.append(
                f"#  Rank {rank:>2} Group  0 Pid    412 on {node} device  {gpu} [{bus}] NVIDIA B300 SXM6 AC"
            )
            rank += 1
    return lines


def single_node_log(node: str, gpus: int, *, p2p: bool, shm: bool, hca: str | None) -> str:
    """all_reduce_perf -g GPUS on one node, as its Job's pod prints it."""
    prefix = _prefix(node)
    lines = [*_banner([node], gpus, True), f"{prefix} Bootstrap : Using eth0:10.233.64.12<0>",
             f"NCCL version {NCCL_VERSION}"]  # fmt: skip
    if hca:
        lines.append(f"{prefix} NCCL_IB_HCA set by environment to {hca}")
    if not p2p:
        lines.append(f"{prefix} NCCL_P2P_DISABLE set by environment to 1")
    if not shm:
        lines.append(f"{prefix} NCCL_SHM_DISABLE set by environment to 1")
    if hca:
        lines += [f"{prefix} NET/IB : Using [0]{hca}:1/RoCE [RO]; OOB eth0:10.233.64.12<0>",
                  f"{prefix} Using network IB"]  # fmt: skip
    if not p2p and not shm:
        # ncclTopoCheckNet: NVLink between the GPUs is faster than the NIC, so NET refuses too.
        lines += [
            f"{node}:412:412 [0] transport.cc:39 NCCL WARN No transport found for rank 0[18000] -> rank 1[28000]",
            f"{node}:412:412 [0] NCCL INFO transport.cc:213 -> 2",
            f"{node}:412:412 [0] NCCL INFO init.cc:1334 -> 2",
            f"{node}: Test NCCL failure common.cu:1031 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '",
        ]
        return "\n".join(lines) + "\n"
    via = "P2P/CUMEM" if p2p else "SHM"
    for channel in range(4):
        for gpu in range(gpus):
            peer = (gpu + 1) % gpus
            lines.append(
                f"{prefix} Channel {channel:02d}/0 : {gpu}[{gpu}] -> {peer}[{peer}] via {via}"
            )
    lines.append(f"{prefix} comm 0x55f90cbfd740 rank 0 nranks {gpus} cudaDev 0 nvmlDev 0 busId 18000 "
                 "commId 0x795b968dc454cfee - Init COMPLETE")  # fmt: skip
    lines += _table(NVLINK_BUSBW if p2p else 48.3, gpus)
    return "\n".join(lines) + "\n"


def inter_node_log(
    nodes: Sequence[str], gpus: int, *, hca: str, tc: str | None, socket: bool, no_transport: bool
) -> str:
    """The launcher's log of an MPIJob with one rank per GPU across ``nodes``."""
    first = nodes[0]
    prefix = _prefix(first)
    ranks = gpus * len(nodes)
    lines = [*_banner(nodes, gpus, False), f"{prefix} Bootstrap : Using eth0:10.233.64.12<0>",
             f"NCCL version {NCCL_VERSION}", f"{prefix} NCCL_IB_HCA set by environment to {hca}"]  # fmt: skip
    if tc:
        lines.append(f"{prefix} NCCL_IB_TC set by environment to {tc}")
    if socket or no_transport:
        lines += [f"{prefix} NET/IB : No device found.",
                  f"{prefix} NET/Socket : Using [0]eth0:10.233.64.12<0>"]  # fmt: skip
    if no_transport:
        # The ranks' NET plugin was told off sockets too (NCCL_NET=IB): nothing connects.
        lines += [
            f"{first}:412:412 [0] NCCL INFO NCCL_NET set by environment to IB",
            f"{first}:412:412 [0] net.cc:664 NCCL WARN Error: network IB not found.",
            f"{first}:412:412 [0] transport.cc:39 NCCL WARN No transport found for rank 0[18000] -> rank {gpus}[18000]",
            f"{first}: Test NCCL failure common.cu:1031 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '",
        ]
        return "\n".join(lines) + "\n"
    if socket:
        lines.append(f"{prefix} Using network Socket")
        via = ["NET/Socket/0"]
        busbw = SOCKET_BUSBW
    else:
        lines += [
            f"{prefix} NET/IB : Using [0]{hca}:1/RoCE [RO]; OOB eth0:10.233.64.12<0>",
            f"{prefix} Using network IB",
            f"{prefix} DMA-BUF is available on GPU device 0",
            f"{prefix} GPU Direct RDMA Enabled for GPU 18000 / HCA 0 (distance 4 <= 4), read 1",
        ]
        via = ["NET/IB/0/GDRDMA"]
        busbw = RDMA_BUSBW
    for channel in range(2):
        lines.append(
            f"{prefix} Channel {channel:02d}/0 : {ranks - 1}[0] -> 0[0] [receive] via {via[0]}"
        )
        lines.append(
            f"{prefix} Channel {channel:02d}/0 : {gpus - 1}[7] -> {gpus}[0] [send] via {via[0]}"
        )
    for gpu in range(1, gpus):
        lines.append(f"{prefix} Channel 00/0 : {gpu - 1}[{gpu - 1}] -> {gpu}[{gpu}] via P2P/CUMEM")
    lines.append(f"{prefix} comm 0x55f90cbfd740 rank 0 nranks {ranks} cudaDev 0 nvmlDev 0 busId 18000 "
                 "commId 0x795b968dc454cfee - Init COMPLETE")  # fmt: skip
    lines += _table(busbw, ranks)
    return "\n".join(lines) + "\n"


# -- the nccl-tests image and its launcher, as they are ------------------------------------

# coreweave/nccl-tests Dockerfile (the site's default measurements.nccl_tests_image): HPC-X's
# Open MPI under /opt/hpcx/ompi/bin and CUDA on the PATH (its "auto-generated paths" ENV),
# the tests built by ``make MPI=1`` in ``WORKDIR /opt/nccl-tests`` (so under
# /opt/nccl-tests/build, also reachable through the /opt/nccl_tests symlink), perftest built
# with CUDA and installed under /usr/local/bin, and no USER: containers run as root.
NCCL_TESTS_IMAGE_PATH = (
    "/opt/hpcx/ompi/bin", "/usr/local/nvidia/bin", "/usr/local/cuda/bin", "/usr/local/sbin",
    "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
)  # fmt: skip
NCCL_TESTS_IMAGE_FILES = frozenset(
    {
        *(f"{root}/build/{t}_perf" for root in ("/opt/nccl-tests", "/opt/nccl_tests")
          for t in ("all_reduce", "all_gather", "alltoall", "broadcast", "reduce_scatter",
                    "sendrecv")),
        "/opt/hpcx/ompi/bin/mpirun", "/usr/local/bin/ib_write_bw", "/usr/local/bin/ib_read_bw",
        "/usr/local/bin/ib_send_bw", "/usr/local/bin/ib_write_lat", "/usr/bin/sh", "/bin/sh",
    }
)  # fmt: skip


def image_has(program: str) -> bool:
    """Whether the nccl-tests image can exec ``program``: a path it holds, or a bare name
    found on its PATH (execvp's rule)."""
    if "/" in program:
        return posixpath.normpath(program) in NCCL_TESTS_IMAGE_FILES
    return any(f"{d}/{program}" in NCCL_TESTS_IMAGE_FILES for d in NCCL_TESTS_IMAGE_PATH)


def is_nccl_tests_image(image: str) -> bool:
    """The lab knows the layout of the nccl-tests image only (any tag, behind any mirror)."""
    return "nccl-tests" in image.rsplit(":", 1)[0]


# Open MPI 4.1's orterun options that take a value (orte/orted/orted_submit.c cmd_line_init):
# what mpirun skips before it takes the first other word as the program.
_MPIRUN_VALUED = frozenset(
    {"-np", "-n", "-c", "--np", "--bind-to", "-bind-to", "--map-by", "-map-by", "-x", "-H",
     "--host", "-host", "--hostfile", "-hostfile", "--rank-by", "-wdir", "--wdir", "--prefix"}
)  # fmt: skip

MPIRUN_ROOT_REFUSAL = """\
--------------------------------------------------------------------------
mpirun has detected an attempt to run as root.

Running as root is *strongly* discouraged as any mistake (e.g., in
defining TMPDIR) or bug can result in catastrophic damage to the OS
file system, leaving your system in an unusable state.

We strongly suggest that you run mpirun as a non-root user.

You can override this protection by adding the --allow-run-as-root option
to the cmd line or by setting two environment variables in the following way:
the variable OMPI_ALLOW_RUN_AS_ROOT=1 to indicate the desire to override this
protection, and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 to confirm the choice and
add one more layer of certainty that you want to do so.
We reiterate our advice against doing so - please proceed at your own risk.
--------------------------------------------------------------------------
"""


def mpirun_program(argv: Sequence[str]) -> str | None:
    """The program mpirun would launch: the first word that is neither an option nor an
    option's value (``--mca`` takes two)."""
    words = list(argv[1:])
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("--mca", "-mca", "--gmca", "-gmca"):
            i += 3
        elif word in _MPIRUN_VALUED:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return word
    return None


def launcher_failure(argv: Sequence[str], env: Mapping[str, str | None], uid: int) -> str | None:
    """What the MPIJob launcher's mpirun prints when it refuses to start, or None.

    Open MPI (orte/tools/orterun/orterun.c, prte in 5.x): as root without
    ``--allow-run-as-root`` and without both OMPI_ALLOW_RUN_AS_ROOT=1 and
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 it exits 1 with MPIRUN_ROOT_REFUSAL; a program it
    cannot find is "unable to find the specified executable file" (help-orterun.txt).
    """
    if not argv or posixpath.basename(argv[0]) not in ("mpirun", "mpiexec"):
        return None
    allowed = "--allow-run-as-root" in argv or (
        env.get("OMPI_ALLOW_RUN_AS_ROOT") == "1"
        and env.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1"
    )
    if uid == 0 and not allowed:
        return MPIRUN_ROOT_REFUSAL
    program = mpirun_program(argv)
    if program is None or not image_has(program):
        return (
            "--------------------------------------------------------------------------\n"
            "mpirun was unable to find the specified executable file, and therefore\n"
            "did not launch the job.  This error was first reported for process\n"
            "rank 0; it may have occurred for other processes as well.\n\n"
            f"Executable: {program}\n"
            "--------------------------------------------------------------------------\n"
        )
    return None


def exec_failure(argv: Sequence[str]) -> str | None:
    """A container of the nccl-tests image whose program it cannot exec, or None.

    ``sh -c SCRIPT sh PROGRAM ...`` ending in ``exec "$@"`` (the exported forms): dash prints
    ``exec: PROGRAM: not found`` and exits 127. A bare command: the runtime cannot start the
    container (runc: ``exec: "PROGRAM": executable file not found in $PATH``).
    """
    if len(argv) >= 5 and argv[0] in ("sh", "/bin/sh") and argv[1] == "-c":
        program = argv[4]
        return None if image_has(program) else f"sh: 1: exec: {program}: not found\n"
    if argv and not image_has(argv[0]):
        return (
            "failed to create containerd task: failed to create shim task: OCI runtime create "
            f'failed: runc create failed: unable to start container process: exec: "{argv[0]}": '
            "executable file not found in $PATH: unknown\n"
        )
    return None
