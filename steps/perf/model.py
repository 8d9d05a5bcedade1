"""What a measurement is made of: the perftest tests and QP counts the suite runs, the
time limits of a one-shot server, an RDMA endpoint, and a server/client pair with its
cleanup (``ServerRun``)."""

from __future__ import annotations

from dataclasses import dataclass

from steps.common import on_host, shown

SERVER_TIMEOUT_S = 120
LISTEN_GRACE_S = 0.5
BW_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
BW_QPS = 4  # the bandwidth tests and the loads (coexistence, soak, GPU memory)
LAT_TEST, LAT_QPS = "ib_send_lat", 1
QP_SWEEP = (1, 4, 8)


_TESTS = (*BW_TESTS, "ib_write_lat", "ib_read_lat", "ib_send_lat")


@dataclass(frozen=True)
class Endpoint:
    host: str  # host name in the site (transport key)
    device: str
    gid_index: int | str | None  # a str only as the runbook's placeholder
    address: str  # RDMA (bond1) address


# The exit statuses a measurement's server and its clean-up are expected to end with (no
# error to show): pkill(1) of procps-ng exits 1 when no process matched (the one-shot
# server had ended on its own), and the server it did stop ends on that SIGTERM, 128 + 15
# (timeout(1) of coreutils passes the signal on).
STOP_EXITS = {1: "no server was left to stop (it had ended)"}
SERVER_EXITS = {143: "stopped once its client had finished (SIGTERM)"}


@dataclass(frozen=True)
class ServerRun:
    """A one-shot server on the far end, the client on the node, and the server's cleanup."""

    server: list[str]
    client: list[str]
    stop: list[str]  # pkill, for a server the client never reached
    seconds: int = SERVER_TIMEOUT_S  # the server's `timeout`, and the client's limit

    def lines(self, server_host: str) -> list[str]:
        return [
            shown(self.server, on_host(server_host, "first")),
            shown(self.client),
            shown(self.stop, on_host(server_host, "if that server still waits")),
        ]
