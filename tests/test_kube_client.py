"""The Kubernetes client: retries off for real, bad kubeconfigs as plain errors (issue #18)."""

from __future__ import annotations

import socket
import threading

import pytest
import yaml

from wizard.transports.base import UnreachableError
from wizard.transports.kube import KubeClient, KubeError


def kubeconfig(path, server: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t0ken-for-the-test"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


class SlammingServer:
    """Accepts each connection and closes it at once, counting the attempts: urllib3's
    default Retry(3) would come back three more times."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


async def test_one_failed_connection_is_one_attempt(tmp_path):
    server = SlammingServer()
    try:
        client = KubeClient(kubeconfig(tmp_path / "kubeconfig", server.url))
        with pytest.raises(UnreachableError, match="cannot reach the API server"):
            await client.request("GET", "/version")
        # Give a retrying client the time to come back before counting.
        threading.Event().wait(0.5)
        assert server.accepted == 1
    finally:
        server.close()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary", "is not text"),
        (b"- a\n- list\n", "is not a kubeconfig"),
        (b"key: [unclosed\n", "is not valid YAML"),
        (b"apiVersion: v1\nkind: Config\n", "kubeconfig"),
    ],
)
def test_a_bad_kubeconfig_is_a_kube_error(tmp_path, content, says):
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    with pytest.raises(KubeError, match=says):
        KubeClient(str(path))


def test_a_folder_as_kubeconfig_is_a_kube_error(tmp_path):
    with pytest.raises(KubeError, match="not a regular file"):
        KubeClient(str(tmp_path))
