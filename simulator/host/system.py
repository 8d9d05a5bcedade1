"""What a lab host says about itself and its software: ``uname``, ``hostname``,
``containerd --version``, ``echo $SSH_CONNECTION``, ``ulimit``, ``rpm -q`` and ``dnf
install``, and the tools that need no state (``true``, ``sleep``, the warp and vLLM
clients' canned results)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.faults import Fault
from simulator.host.dispatch import lab_tool
from simulator.host.model import RHEL_PACKAGES, Result
from wizard.facts.system import CONTAINERD_VERSION

if TYPE_CHECKING:
    from simulator.host.machine import HostState


class SystemInfo:
    """The host's identity, packages and stateless tools, from its state."""

    def __init__(self, state: HostState) -> None:
        self.state = state

    def cmd_uname(self, args: list[str]) -> Result:
        if args == ["-r"]:
            return Result(self.state.kernel + "\n")
        if args == ["-m"]:
            return Result("x86_64\n")
        return Result("Linux\n")

    def cmd_hostname(self, args: list[str]) -> Result:
        return Result(self.state.name + "\n")

    def cmd_echo(self, args: list[str]) -> Result:
        text = " ".join(args)
        if "$SSH_CONNECTION" in text:
            server = self.state.rdma_ip if self.state.ssh_over_bond1 else self.state.mgmt_ip
            text = text.replace("$SSH_CONNECTION", f"10.10.255.1 51514 {server} 22")
        return Result(text + "\n")

    def cmd_ulimit(self, args: list[str]) -> Result:
        return Result("unlimited\n")

    def cmd_rpm(self, args: list[str]) -> Result:
        names = [a for a in args if not a.startswith("-")]
        out, status = [], 0
        for name in names:
            headers = sorted(p for p in self.state.packages if p.startswith("kernel-devel-"))
            if name == "kernel-devel" and headers:
                # rpm -q NAME: any installed version, the newest kernel's headers too.
                out.append(headers[-1])
            elif name in self.state.packages:
                out.append(RHEL_PACKAGES.get(name, f"{name}-1.0-1.el10.x86_64"))
            else:
                out.append(f"package {name} is not installed")
                status = 1
        return Result("\n".join(out) + "\n", "", status)

    def cmd_dnf(self, args: list[str]) -> Result:
        names = [a for a in args if not a.startswith("-") and a != "install"]
        self.state.packages.update(names)
        return Result("Complete!\n")

    def cmd_warp(self, args: list[str]) -> Result:
        rdma = "--rdma" in args
        speed = 38.4 if rdma else 21.7
        return Result(f"warp: Benchmark data written to warp-get.csv.zst\nOperation: GET\n"
                      f"* Average: {speed} GiB/s, {speed * 1024 / 16:.2f} obj/s\n")  # fmt: skip

    def cmd_vllm(self, args: list[str]) -> Result:
        return Result("============ Serving Benchmark Result ============\nSuccessful requests:  64\n"
                      "Output token throughput (tok/s):          18422.51\nMean TTFT (ms):   81.4\n")  # fmt: skip

    def cmd_true(self, args: list[str]) -> Result:
        return Result()

    def cmd_sleep(self, args: list[str]) -> Result:
        return Result()  # simulated time: a wait loop in a script does not wait here


@lab_tool(CONTAINERD_VERSION)
def containerd(host: HostState, args: list[str]) -> Result:
    """`containerd --version` as containerd's cmd/containerd prints it (version.Package,
    version.Version, version.Revision): the runtime the lab's faults pick."""
    if Fault.CONTAINERD_1_7 in host.faults:
        return Result(
            "containerd github.com/containerd/containerd v1.7.27 "
            "05044ec0a9a75232cad458027ca83437aae3f4da\n"
        )
    if Fault.CONTAINERD_2_0_0 in host.faults:
        # containerd 2.0.0's own `--version` line (its module path gained /v2 in 2.0).
        return Result(
            "containerd github.com/containerd/containerd/v2 v2.0.0 "
            "207ad711eabd375a01713109a8a197d197ff6542\n"
        )
    return Result(
        "containerd github.com/containerd/containerd/v2 v2.1.4 "
        "75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n"
    )
