"""Simulated benchmarks for the lab: perftest server/client pairs, iperf3, nvidia-smi topo
and NCCL, printed in the real tools' formats (see ../shared/fixtures/perftest, nccl-log,
nccl-tests, nvidia-smi-topo).

A perftest server started on one simulated host waits for a client from another, like
the real tool: the broker pairs them by (server address, port).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from simulator.faults import Fault
from simulator.host import LabHost

PERFTEST = ("ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat")
LINE_RATE_GBPS = 100.0
# What one E810 100G port gives per QP count (several QPs are needed to fill it).
BW_BY_QPS = {1: 61.84, 2: 88.12, 4: 96.37, 8: 97.42, 16: 97.51}
TITLES = {
    "ib_write_bw": "RDMA_Write BW Test",
    "ib_read_bw": "RDMA_Read BW Test",
    "ib_send_bw": "Send BW Test",
    "ib_write_lat": "RDMA_Write Latency Test",
    "ib_read_lat": "RDMA_Read Latency Test",
    "ib_send_lat": "Send Latency Test",
}


@dataclass
class PerftestArgs:
    tool: str
    device: str = "irdma0"
    gid: int = 0
    qps: int = 1
    port: int = 18515
    rdma_cm: bool = False
    tos: int | None = None
    gbits: bool = False
    cuda: int | None = None
    dmabuf: bool = False
    duration: int | None = None
    cpu_util: bool = False
    rate_limit: float | None = None  # --rate_limit, in Gb/s (--rate_units=g, the default)
    server: str | None = None  # the client's target address

    @classmethod
    def parse(cls, argv: list[str]) -> PerftestArgs:
        """What perftest's ``parser()`` (src/perftest_parameters.c) takes from ``argv``.

        Raises PerftestUsageError with perftest's own message for what it refuses: an
        option getopt_long does not know, an option the test type does not allow (``-q`` on
        a latency test), a non-numeric value.
        """
        args = cls(argv[0])
        latency = args.tool.endswith("_lat")
        words = list(argv[1:])
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            if not word.startswith("-") or word == "-":
                args.server = word
                continue
            if word.startswith("--"):
                name, has_value, value = word[2:].partition("=")
                takes = _LONG_OPTIONS.get(name)
                if takes is None:
                    raise PerftestUsageError(f"{args.tool}: unrecognized option '{word}'")
                if takes and not has_value:
                    if index >= len(words):
                        raise PerftestUsageError(
                            f"{args.tool}: option '{word}' requires an argument"
                        )
                    value = words[index]
                    index += 1
                option = name
            else:
                letter = word[1:2]
                if letter in _SHORT_FLAGS and len(word) == 2:
                    value = ""
                elif letter in _SHORT_WITH_VALUE:
                    value = word[2:]
                    if not value:
                        if index >= len(words):
                            raise PerftestUsageError(
                                f"{args.tool}: option requires an argument -- '{letter}'"
                            )
                        value = words[index]
                        index += 1
                else:
                    raise PerftestUsageError(f"{args.tool}: invalid option -- '{letter}'")
                option = _SHORT_NAMES.get(letter, letter)
            if latency and option in _BW_ONLY:
                raise PerftestUsageError(_BW_ONLY[option])
            args._apply(option, value)
        return args

    def _apply(self, option: str, value: str) -> None:
        try:
            if option == "ib-dev":
                self.device = value
            elif option == "gid-index":
                self.gid = int(value)
            elif option == "qp":
                self.qps = int(value)
            elif option == "port":
                self.port = int(value)
            elif option == "rdma_cm":
                self.rdma_cm = True
            elif option == "tos":
                self.tos = int(value)
            elif option == "duration":
                self.duration = int(value)
            elif option == "report_gbits":
                self.gbits = True
            elif option == "use_cuda":
                self.cuda = int(value)
            elif option == "use_cuda_dmabuf":
                self.dmabuf = True
            elif option == "cpu_util":
                self.cpu_util = True
            elif option == "rate_limit":
                self.rate_limit = float(value)
        except ValueError:
            # CHECK_VALUE in perftest_parameters.h
            raise PerftestUsageError(f" Invalid value for {option}: {value}") from None


class PerftestUsageError(ValueError):
    """perftest's parser refused the command line (it exits 1 before any traffic)."""


# perftest_parameters.c: getopt_long(argc, argv,
# "w:y:p:d:i:m:s:n:t:u:S:x:c:q:I:o:M:r:Q:A:l:D:f:B:T:L:E:J:j:K:k:X:W:aFegzRvhbNVCHUOZP", ...)
_SHORT_WITH_VALUE = set("wypdimsntuSxcqIoMrQAlDfBTLEJjKkXW")
_SHORT_FLAGS = set("aFegzRvhbNVCHUOZP")
_SHORT_NAMES = {
    "d": "ib-dev", "x": "gid-index", "q": "qp", "p": "port", "R": "rdma_cm", "T": "tos",
    "D": "duration", "s": "size", "n": "iters", "F": "CPU-freq", "a": "all", "b": "bidirectional",
    "N": "noPeak", "h": "help",
}  # fmt: skip
# The long options of the same table (name -> takes a value), those a site may pass.
_LONG_OPTIONS = {
    "ib-dev": True, "ib-port": True, "mtu": True, "size": True, "iters": True, "tx-depth": True,
    "qp": True, "port": True, "gid-index": True, "tos": True, "duration": True, "rdma_cm": False,
    "all": False, "CPU-freq": False, "bidirectional": False, "help": False, "report_gbits": False,
    "cpu_util": False, "out_json": False, "out_json_file": True, "run_infinitely": False,
    "report-both": False, "use_cuda": True, "use_cuda_bus_id": True, "use_cuda_dmabuf": False,
    "use_hugepages": False, "perform_warm_up": False, "connection": True, "noPeak": False,
    # The rate limiter (usage text "Rate Limiter:"): --rate_limit=<rate>, --rate_units=<units>
    # [Mgp], --rate_limit_type=<type> [HW/SW/PP], --burst_size=<size>.
    "rate_limit": True, "rate_units": True, "rate_limit_type": True, "burst_size": True,
}  # fmt: skip
# Refused on latency tests, with perftest's words (case 'q', 'b', 'N' of parser()).
_BW_ONLY = {
    "qp": " Multiple QPs only available on bw tests",
    "bidirectional": " Bidirectional is only available in BW test",
    "noPeak": " NoPeak only valid for BW tests",
}


@dataclass
class Broker:
    """Pairs perftest servers and clients across the lab's hosts."""

    listeners: dict[tuple[str, int], asyncio.Future] = field(default_factory=dict)

    def listen(self, address: str, port: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.listeners[(address, port)] = future
        return future

    def connect(self, address: str, port: int) -> asyncio.Future | None:
        return self.listeners.pop((address, port), None)

    def connect_threadsafe(self, address: str, port: int, client: str) -> bool:
        """``connect`` from another thread (the lab's API server runs pods there): hand the
        waiting server its client on the server's own event loop."""
        future = self.listeners.pop((address, port), None)
        if future is None or future.done():
            return False
        future.get_loop().call_soon_threadsafe(
            lambda: None if future.done() else future.set_result(client)
        )
        return True

    def stop(self, port: int | None = None) -> int:
        stopped = 0
        for key in list(self.listeners):
            if port is None or key[1] == port:
                future = self.listeners.pop(key)
                if not future.done():
                    future.cancel()
                stopped += 1
        return stopped


def _header(args: PerftestArgs, host: LabHost) -> list[str]:
    bar = "-" * 87
    lines = [bar, f"                    {TITLES[args.tool]}"]
    lines += [
        f" Dual-port       : OFF\t\tDevice         : {args.device}",
        f" Number of qps   : {args.qps}\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : OFF",
        " TX depth        : 128",
        " CQ Moderation   : 100",
        " Mtu             : 4096[B]",
        " Link type       : Ethernet",
        f" GID index       : {args.gid}",
        " Max inline data : 0[B]",
        f" rdma_cm QPs\t : {'ON' if args.rdma_cm else 'OFF'}",
    ]
    if args.rdma_cm:
        lines.append(
            f" Data ex. method : rdma_cm \tTOS    : {args.tos if args.tos is not None else 0}"
        )
    else:
        lines.append(" Data ex. method : Ethernet")
    lines.append(bar)
    return lines


def gpu_bus(gpu: int) -> str:
    """The lab's GPU PCIe bus numbers (the nvidia-smi and NCCL outputs use the same)."""
    return f"{0x18 + 0x10 * gpu:02x}"


# The lab's adversarial variant of the topology (the "nic-on-cpu-root-port" fault): the E810
# is an add-in card on a CPU root port, NODE from every GPU. That is the normal HGX B300 case
# (the baseboard's PCIe switches carry the GPUs and the ConnectX NICs; an add-in NIC hangs
# off the CPU), as in the real boards of ../shared/fixtures/nvidia-smi-topo (NICs NODE/SYS
# from every GPU).
NIC_ON_ROOT_PORT = "nic-on-cpu-root-port"


def gpu_nic_link(gpu: int, gpus: int, faults: Collection[str] = ()) -> str:
    """The lab's topology, as ``topo_output`` prints it: the E810 under GPU0-3's PCIe switch
    (PXB), GPU4-7 on the other socket (SYS); NODE from every GPU under NIC_ON_ROOT_PORT."""
    if NIC_ON_ROOT_PORT in faults:
        return "NODE"
    return "PXB" if gpu < gpus // 2 else "SYS"


# GPUDirect RDMA across the CPU root complex and the SMP interconnect works but is slow
# (NVIDIA's GPUDirect RDMA guide, "Supported Systems": peer-to-peer traffic through the
# root complex performs poorly, and across CPU sockets worse). The guide gives no number:
# the fraction below of a PXB GPU's bandwidth is the lab's adversarial choice, low enough
# that measuring the wrong GPU is visible. NODE (NIC_ON_ROOT_PORT) gets no penalty, also a
# choice: on a PCIe Gen5 root port a 100 Gb/s NIC is not the bottleneck.
SYS_GPU_SHARE = 0.41


def client_output(args: PerftestArgs, host: LabHost, *, visible: list[int] | None = None) -> str:
    """The client's output; ``visible``: the host GPUs the container sees, in CUDA's order
    (``--use_cuda=N`` takes the N-th), all of them in PCI order when None."""
    lines = []
    order = list(range(host.state.gpus_present)) if visible is None else visible
    gpu = order[args.cuda] if args.cuda is not None and args.cuda < len(order) else None
    if args.cuda is not None:
        lines += [
            "initializing CUDA",
            "Listing all CUDA devices in system:",
            *(f"CUDA device {i}: PCIe address is {gpu_bus(g)}:00" for i, g in enumerate(order)),
            f"Picking device No. {args.cuda}",
            f"[pid = 4242, dev = {args.cuda}] device name = [NVIDIA B300 SXM6 AC]",
            "creating CUDA Ctx",
            "making it the current CUDA Ctx",
            "cuMemAlloc() of a 67108864 bytes GPU buffer",
            "allocated GPU buffer address at 00007f3fa4000000 pointer=0x7f3fa4000000",
        ]
        if args.dmabuf:
            lines.append(
                "using DMA-BUF for GPU buffer address at 0x7f3fa4000000 aligned at 0x7f3fa4000000 with aligned size 67108864"
            )
    lines += _header(args, host)
    lines += [
        " local address: LID 0x01 QPN 0x0011 PSN 0x5a1f3c RKey 0x69540273 VAddr 0x007e4ef245e000",
        f" GID: 00:00:00:00:00:00:00:00:00:00:255:255:{host.state.rdma_ip.replace('.', ':')}",
        " remote address: LID 0x01 QPN 0x0012 PSN 0x2ce2c7 RKey 0xbfde4945 VAddr 0x0075bee2e6f000",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:50:200",
        "-" * 87,
    ]
    if args.tool.endswith("_lat"):
        lines.append(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
            "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        )
        base = 2.61 if args.tool == "ib_send_lat" else 2.43
        lines.append(f" 2       1000          {base:.2f}           7.44         {base + 0.1:.2f}               "
                     f"{base + 0.14:.2f}           0.14            3.40                   7.44   ")  # fmt: skip
    else:
        bw = BW_BY_QPS.get(args.qps, 97.4)
        if args.tool == "ib_read_bw":
            bw *= 0.97
        if args.cuda is not None:
            bw *= 0.92 if args.dmabuf else 0.88
            if gpu is not None and gpu_nic_link(gpu, host.state.gpus_present, host.faults) == "SYS":
                bw *= SYS_GPU_SHARE
        if args.rate_limit is not None:
            # The software limiter paces the whole process, not each QP
            # (perftest_resources.c run_iter_bw: one gap_deadline / is_sending_burst /
            # burst_iter shared by the loop over num_of_qps, rate_limit_pps computed once):
            # the test carries at most the rate whatever -q, a little under it in practice.
            bw = min(bw, args.rate_limit * 0.98)
        units = "Gb/sec" if args.gbits else "MB/sec"
        value = bw if args.gbits else bw * 1000 / 8
        # Duration mode (-D) reports no peak (0.00) and many iterations; --cpu_util adds a
        # CPU_Util[%] column there (a real run: NVIDIA forum / perftest's print_report_bw).
        cpu = args.cpu_util and args.duration is not None
        lines.append(
            f" #bytes     #iterations    BW peak[{units}]    BW average[{units}]   MsgRate[Mpps]"
            + ("    CPU_Util[%]" if cpu else "")
        )
        iterations = 1059332 * (args.duration or 0) // 10 if args.duration else 5000
        peak = 0.0 if args.duration else value * 1.002
        lines.append(f" 65536      {iterations:<16} {peak:.2f}            {value:.2f}            "
                     f"{bw * 1e9 / 8 / 65536 / 1e6:.6f}"
                     + (f"         {3.1 + 0.6 * args.qps:.2f}" if cpu else ""))  # fmt: skip
    lines.append("-" * 87)
    return "\n".join(lines) + "\n"


def perftest_help(host: LabHost) -> str:
    lines = [
        "Usage:",
        "  ib_write_bw            start a server and wait for connection",
        "  ib_write_bw <host>     connect to server at <host>",
        " -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)",
        " -q, --qp=<num of qp's>  Num of qp's(default 1)",
        " -R, --rdma_cm  Connect QPs with rdma_cm and run test on those QPs",
        " -T, --tos=<tos value>  Set <tos_value> to RDMA-CM QPs. available only with -R flag",
        " -x, --gid-index=<index>  Test uses GID with GID index",
        " --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)",
    ]
    if host.role == "gpu":
        lines += [
            " --use_cuda=<cuda device id>  Use CUDA specific device for GPUDirect RDMA testing",
            " --use_cuda_dmabuf  Use CUDA DMA-BUF for GPUDirect RDMA testing",
        ]
    return "\n".join(lines) + "\n"


# iperf3's own parser (src/iperf_api.c, iperf_parse_arguments): the getopt string, and the
# options it marks client-only / server-only, refused in the other role with these words.
# "p:f:i:D1VJvsc:ub:t:n:k:l:P:Rw:B:M:N46S:L:ZO:F:A:T:C:dI:hX:"
IPERF3_WITH_VALUE = set("pficbtnklPwBMSLOFATCIX")
IPERF3_FLAGS = set("D1VJvsuRN46Zdh")
IPERF3_CLIENT_ONLY = set("ubtnklPRwMNSLZOTC")
IPERF3_SERVER_ONLY = set("1D")


def check_iperf3_args(argv: list[str]) -> str | None:
    """iperf3's refusal of a command line (its message), or None when it takes it."""
    words = argv[1:]
    seen: set[str] = set()
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-") or len(word) < 2 or word.startswith("--"):
            if word.startswith("--"):
                return f"iperf3: unrecognized option '{word}'"
            continue
        letter = word[1]
        if letter in IPERF3_WITH_VALUE:
            if len(word) == 2:
                if index >= len(words):
                    return f"iperf3: option requires an argument -- '{letter}'"
                index += 1
        elif letter not in IPERF3_FLAGS:
            return f"iperf3: invalid option -- '{letter}'"
        seen.add(letter)
    if "s" in seen and "c" in seen:
        return "iperf3: parameter error - cannot be both server and client"
    if "s" not in seen and "c" not in seen:
        return "iperf3: parameter error - must either be a client (-c) or server (-s)"
    if "s" in seen and seen & IPERF3_CLIENT_ONLY:
        return "iperf3: parameter error - some option you are trying to set is client only"
    if "c" in seen and seen & IPERF3_SERVER_ONLY:
        return "iperf3: parameter error - some option you are trying to set is server only"
    return None


def iperf3_bitrate(argv: list[str]) -> float | None:
    """iperf3's -b value in bits/s (its unit_atof_rate: a number with K, M or G, 1000-based)."""
    if "-b" not in argv or argv.index("-b") + 1 >= len(argv):
        return None
    text = argv[argv.index("-b") + 1].split("/")[0]
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}.get(text[-1:].lower(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        value = float(number) * scale
    except ValueError:
        return None
    return value or None  # -b 0: unlimited


def iperf3_json(streams: int, reverse: bool, per_stream_bps: float | None = None) -> str:
    """iperf3 -J's result; ``per_stream_bps``: -b, which iperf3 applies to each stream
    (iperf3(1): "the throughput limit is applied separately to each stream")."""
    rate = 94.1e9 if not reverse else 93.6e9
    if per_stream_bps is not None:
        rate = min(rate, per_stream_bps * streams * 0.99)
    return json.dumps(
        {
            "start": {
                "test_start": {
                    "protocol": "TCP",
                    "num_streams": streams,
                    "duration": 10,
                    "reverse": int(reverse),
                }
            },
            "end": {
                "sum_sent": {
                    "seconds": 10.0,
                    "bytes": int(rate / 8 * 10),
                    "bits_per_second": rate * 1.001,
                    "retransmits": 12,
                },
                "sum_received": {
                    "seconds": 10.0,
                    "bytes": int(rate / 8 * 10),
                    "bits_per_second": rate,
                },
            },
        },
        indent=1,
    )


def topo_output(gpus: int, faults: Collection[str] = (), *,
                nic_link: str | None = None) -> str:  # fmt: skip
    """nvidia-smi topo -m for a B300x8 node: the E810 (NIC0/NIC1) where ``gpu_nic_link``
    puts it (``nic_link``: every GPU at that link instead, for tests)."""
    labels = [f"GPU{i}" for i in range(gpus)] + ["NIC0", "NIC1"]
    header = "\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = []
    for i, row in enumerate(labels):
        cells = []
        for j, col in enumerate(labels):
            if i == j:
                cells.append(" X ")
            elif row.startswith("GPU") and col.startswith("GPU"):
                cells.append("NV18")
            elif row.startswith("NIC") and col.startswith("NIC"):
                cells.append("PIX")
            else:
                gpu = i if row.startswith("GPU") else j
                cells.append(nic_link or gpu_nic_link(gpu, gpus, faults))
        tail = ""
        if row.startswith("GPU"):
            tail = "\t0-63,128-191\t0\t\tN/A" if i < gpus // 2 else "\t64-127,192-255\t1\t\tN/A"
        rows.append(f"{row}\t" + "\t".join(cells) + tail)
    legend = "\n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n  PIX  = Connection traversing at most a single PCIe bridge\n  NV#  = Connection traversing a bonded set of # NVLinks\n\nNIC Legend:\n\n  NIC0: irdma0\n  NIC1: irdma1\n"
    return header + "\n" + "\n".join(rows) + legend


async def run_perftest(argv: list[str], host: LabHost, broker: Broker) -> tuple[str, str, int]:
    """Run one perftest command on ``host``: a server waits for its client (60 s at most)."""
    if "--help" in argv or "-h" in argv:
        # parser(): case 'h' prints usage() and returns HELP_EXIT; main() exits 1 on it.
        return perftest_help(host), "", 1
    try:
        args = PerftestArgs.parse(argv)
    except PerftestUsageError as exc:
        # perftest's main(): a parser failure prints this and exits 1, before any traffic.
        return "", f"{exc}\n Parser function exited with Error\n", 1
    if (refused := tos_refusal(args)) is not None:
        return refused, "", 1
    if args.cuda is None and args.dmabuf:
        return (
            "",
            "CUDA DMA-BUF cannot be used without CUDA\n Parser function exited with Error\n",
            1,
        )
    if args.cuda is not None and host.role != "gpu":
        return (
            "",
            "Perftest was built without CUDA support\n Parser function exited with Error\n",
            1,
        )
    if not any(dev == args.device for dev, _ in host.rdma_devices):
        return (
            "",
            f" IB device {args.device} not found\n Unable to find the Infiniband/RoCE device\n",
            1,
        )
    if args.server is None:
        future = broker.listen(host.state.rdma_ip, args.port)
        waiting = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
        try:
            await asyncio.wait_for(future, args.duration or 60)
        except TimeoutError:
            broker.connect(host.state.rdma_ip, args.port)
            return waiting, "Couldn't connect the client in time\n", 1
        except asyncio.CancelledError:
            return waiting, "", 143  # killed by pkill / timeout
        congestion(host, args, receiver=True)
        return waiting + client_output(args, host), "", 0
    listener = broker.connect(args.server, args.port)
    if listener is None:
        return "", (f"Couldn't connect to {args.server}:{args.port}\n"
                    "Unable to open file descriptor for socket connection Unable to init the socket connection\n"), 1  # fmt: skip
    listener.set_result(host.name)
    tos_reset = "roce-tos-reset" in host.faults and not host.flags.get("roce-tos-reset")
    if args.rdma_cm and args.tos is not None and tos_reset:
        # The fault: LACP renegotiates under the load, bond1 re-forms, Intel's LAG
        # re-registers the RDMA device (simulator/network.py): default_roce_tos is 0.
        host.flags["roce-tos-reset"] = True
        host.reregister_rdma()
    congestion(host, args, receiver=False)
    if "port-drops" in host.faults:
        for port in host.ports:
            port.drops["rx_dropped.nic"] = port.drops.get("rx_dropped.nic", 0) + 37
    tos = effective_tos(host, args)
    received, sent = pause_frames(args)
    for port in host.ports:
        # With PFC on the packets' priority, a congested switch sends pause frames for it.
        prio = traffic_priority(port, tos)
        if prio in port.pfc:
            port.pause_rx[prio] += received
            port.pause_tx[prio] += sent
    if Fault.PERFTEST_NO_CPU_MHZ in host.faults and args.rate_limit is not None:
        # perftest_resources.c run_iter_bw: get_cpu_mhz() <= 0 prints this and carries on
        # with gap_cycles = 0, i.e. the SW limiter never waits: a line-rate run.
        unlimited = replace(args, rate_limit=None)
        return (client_output(unlimited, host),
                "Failed: couldn't acquire cpu frequency for rate limiter.\n", 0)  # fmt: skip
    return client_output(args, host), "", 0


def pause_frames(args: PerftestArgs) -> tuple[int, int]:
    """(XOFF received, XOFF sent) on the client's ports for one congested run. Direction
    follows IEEE 802.1Qbb: the side whose ingress buffer fills sends PFC upstream, so a
    client that writes or sends is paused by the switch (received), one that reads is the
    receiver of the data and pauses the switch (sent). The magnitudes are the lab's
    adversarial choice, not a measurement: they grow with QPs and duration so that a
    comparison of runs of different shapes (which a real switch would also give) is wrong."""
    load = args.qps * (args.duration or 5)
    frames = 59 * load + 7 * args.qps * args.qps
    if args.tool.startswith("ib_read"):
        return 0, frames
    return frames, load // 3


def tos_refusal(args: PerftestArgs) -> str | None:
    """perftest's parser on ``-T`` without ``-R`` (src/perftest_parameters.c,
    force_dependecies: ``tos != DEF_TOS`` and not RawEth prints this on stdout and exits 1,
    before any connection)."""
    if args.tos is not None and not args.rdma_cm:
        return " TOS only valid for rdma_cm based QP and RawEth QP \n"
    return None


def effective_tos(host: LabHost, args: PerftestArgs) -> int:
    """The ToS a perftest QP's packets carry.

    ``-T`` sets it, with ``-R`` only (perftest: rdma_set_option(RDMA_OPTION_ID_TOS); without
    rdma_cm the parser refuses -T, ``tos_refusal``). Without ``-T`` an rdma_cm connection takes the device's
    ``default_roce_tos`` (drivers/infiniband/core/cma.c: ``tos_set`` false ->
    ``cma_dev->default_roce_tos[port]``, written through configfs
    /sys/kernel/config/rdma_cm/<dev>/ports/1/default_roce_tos): what AIStor's clients get.
    Without either, perftest's default traffic class: 0.
    """
    if args.tos is not None:
        return args.tos
    if args.rdma_cm:
        value = host.configfs.get(
            f"/sys/kernel/config/rdma_cm/{args.device}/ports/1/default_roce_tos", "0"
        )
        try:
            return int(value.strip() or "0")
        except ValueError:
            return 0
    return 0


def traffic_priority(port, tos: int) -> int:
    """The priority ice gives a RoCEv2 packet: in DSCP mode (after the first ``dcb app
    dscp-prio`` entry, ice_dcb_nl.c) DSCP = ToS >> 2 looked up in the dscp-prio map,
    unmapped DSCPs on priority 0; otherwise the VLAN PCP, 0 for untagged bond1 traffic."""
    if not port.dcb.dscp_mode:
        return 0
    dscp = tos >> 2
    return next((prio for code, prio in port.dcb.app if code == dscp), 0)


CONGESTED_PACKETS = 2113  # ECN-marked packets per QoS run through the lab's switch


def congestion(host: LabHost, args: PerftestArgs, *, receiver: bool) -> None:
    """DCQCN at work (seed 004 section 3): with ECN on both ends and RoCE traffic in its
    class (-T), the switch marks packets at its threshold; the receiver counts the marks and
    sends CNPs, the sender handles them. Without ECN nothing is marked."""
    if args.tos is None or not host.rdma.ecn_enabled():
        return
    names = ("RxECNMrkd", "cnpSent") if receiver else ("cnpHandled",)
    for name in names:
        host.state.hw_counters[name] = host.state.hw_counters.get(name, 0) + CONGESTED_PACKETS


def split_prefixes(argv: list[str]) -> list[str]:
    """Drop ``timeout N`` / ``sudo -n --`` wrappers the wizard puts in front of a tool."""
    while argv:
        if argv[0] == "timeout" and len(argv) > 2:
            argv = argv[2:]
        elif argv[0] in ("sudo", "-n", "--"):
            argv = argv[1:]
        else:
            break
    return argv
