"""Serve the real control plane on loopback: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, as built by simulator/controlplane/build.py.

The flags are kubeadm's static pod manifests' (cmd/kubeadm/app/phases/controlplane/
manifests.go) cut to one machine: TLS with the lab's PKI (certs.py; etcd's clients too,
with its own CA), client certificates
and a token file for authentication, ``Node,RBAC`` authorization, the API server's default
admission plugins and NodeRestriction, service accounts signed by the lab's key, every
listener on 127.0.0.1 on a free port. The processes share one process group that dies
with the lab: each child asks the kernel for SIGKILL when the lab's process ends
(PR_SET_PDEATHSIG), so a kill -9 of the lab leaves no orphan, and ``stop`` ends the group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from simulator.controlplane import build
from simulator.controlplane.certs import SERVICE_RANGE, Pair, Pki
from simulator.controlplane.versions import ETCD, HELM, KUBECTL, KUBERNETES
from wizard.errors import WizardError

START_TIMEOUT_S = 180.0  # the first start installs RBAC's bootstrap policy (slow on 2 cores)
# A user the token file authenticates with no role at all: the RBAC-denied tests use it.
UNPRIVILEGED_TOKEN = "lab-unprivileged-token-not-a-secret"
UNPRIVILEGED_USER = "lab-unprivileged"


class ControlPlaneError(WizardError):
    """The real control plane is not built, or did not start."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the lab's process ends (prctl(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class RealControlPlane:
    """The four processes, their PKI and a kubeconfig for each client."""

    folder: Path
    cache: Path | None = None
    pki: Pki | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    api_port: int = 0
    etcd_url: str = ""
    _group: int | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def helm(self) -> Path:
        path = build.binary(HELM, "helm", self.cache)
        assert path is not None
        return path

    @property
    def kubectl(self) -> Path:
        """kubectl v1.33, the API server's own version (the skew policy: within one minor)."""
        return self._binary(KUBECTL, "kubectl")

    def _binary(self, component, name: str) -> Path:
        path = build.binary(component, name, self.cache)
        if path is None:
            raise ControlPlaneError(build.missing_reason(self.cache) or f"{name} is not built")
        return path

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        reason = build.missing_reason(self.cache)
        if reason:
            raise ControlPlaneError(reason)
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        logs = self.folder / "logs"
        logs.mkdir(exist_ok=True)
        self.pki = pki = Pki(self.folder / "pki")
        try:
            etcd_port, peer_port = free_port(), free_port()
            self.etcd_url = f"https://127.0.0.1:{etcd_port}"
            self._spawn("etcd", [
                str(self._binary(ETCD, "etcd")), "--name=lab", f"--data-dir={self.folder / 'etcd'}",
                # Clients over TLS with a certificate of etcd's own CA (kubeadm's etcd.yaml);
                # the one member's peer listener stays plain on loopback (no peer joins).
                f"--listen-client-urls=https://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=https://127.0.0.1:{etcd_port}",
                f"--cert-file={pki.etcd_server.cert}", f"--key-file={pki.etcd_server.key}",
                "--client-cert-auth", f"--trusted-ca-file={pki.etcd_ca}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=lab=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync", "--log-level=warn",
            ])  # fmt: skip
            self.api_port = free_port()
            tokens = self.folder / "tokens.csv"
            tokens.write_text(f"{UNPRIVILEGED_TOKEN},{UNPRIVILEGED_USER},lab-unprivileged-uid\n")
            os.chmod(tokens, 0o600)
            self._spawn("kube-apiserver", [
                str(self._binary(KUBERNETES, "kube-apiserver")),
                f"--etcd-servers=https://127.0.0.1:{etcd_port}", f"--etcd-cafile={pki.etcd_ca}",
                f"--etcd-certfile={pki.etcd_client.cert}", f"--etcd-keyfile={pki.etcd_client.key}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={pki.apiserver.cert}", f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca}", f"--token-auth-file={tokens}",
                # kubeadm's and Kubespray's: the Node authorizer and NodeRestriction confine
                # each kubelet (system:node:NAME) to its own Node, Lease and pods.
                "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--kubelet-client-certificate={pki.kubelet_client.cert}",
                f"--kubelet-client-key={pki.kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--cert-dir={self.folder / 'apiserver-certs'}", "--profiling=false",
            ])  # fmt: skip
            self.wait_ready("/readyz", "kube-apiserver")
            for name, pair in (("controller-manager", pki.controller_manager),
                               ("scheduler", pki.scheduler)):  # fmt: skip
                self.write_kubeconfig(self.folder / f"{name}.kubeconfig", pair, name)
            cm = self.folder / "controller-manager.kubeconfig"
            self._spawn("kube-controller-manager", [
                str(self._binary(KUBERNETES, "kube-controller-manager")),
                f"--kubeconfig={cm}", f"--authentication-kubeconfig={cm}",
                f"--authorization-kubeconfig={cm}", "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}", "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca}",
                f"--cluster-signing-cert-file={pki.ca}", f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
            ])  # fmt: skip
            sched = self.folder / "scheduler.kubeconfig"
            self._spawn("kube-scheduler", [
                str(self._binary(KUBERNETES, "kube-scheduler")),
                f"--kubeconfig={sched}", f"--authentication-kubeconfig={sched}",
                f"--authorization-kubeconfig={sched}", "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}", "--leader-elect=false",
            ])  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.folder / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (the child's)
        # One process group of their own (not the lab's: a Ctrl-C at the terminal reaches
        # the lab, which stops them in order), in the lab's session.
        group = 0 if self._group is None else self._group
        with log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                process_group=group,
            )
        if self._group is None:
            self._group = process.pid
        self.processes[name] = process

    def wait_ready(self, path: str, what: str, timeout: float = START_TIMEOUT_S) -> None:
        assert self.pki is not None
        context = self.ssl_context(self.pki.admin)
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited with {process.returncode} while starting; its log: "
                        f"{self.folder / 'logs' / (name + '.log')}\n{self.log_tail(name)}"
                    )
            try:
                with urllib.request.urlopen(self.url + path, context=context, timeout=5) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(0.5)
        raise ControlPlaneError(f"{what} was not ready after {timeout:.0f} s ({last})")

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.folder / "logs" / f"{name}.log"
        with contextlib.suppress(OSError):
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """SIGTERM each in the reverse of the start order, as a control plane is taken down
        (the controllers, then the API server while etcd still answers it, then etcd); a
        SIGTERM to all at once had etcd wait on the API server's watch streams and the API
        server retry etcd until the 10 s SIGKILL (measured 1.4 s in order, 10 s at once)."""
        deadline = time.monotonic() + 10
        for process in reversed(list(self.processes.values())):
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        if self._group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._group, signal.SIGKILL)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        self.processes.clear()
        self._group = None

    # -- clients -------------------------------------------------------------------------------

    def ssl_context(self, pair: Pair | None = None) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        if pair is not None:
            context.load_cert_chain(str(pair.cert), str(pair.key))
        return context

    def kubeconfig(self, pair: Pair | None = None, user: str = "lab-admin",
                   token: str | None = None) -> dict:  # fmt: skip
        assert self.pki is not None
        credentials: dict = {"token": token} if token else {
            "client-certificate": str((pair or self.pki.admin).cert),
            "client-key": str((pair or self.pki.admin).key)}  # fmt: skip
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {"server": self.url,
                                                     "certificate-authority": str(self.pki.ca)}}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": user}}],
            "current-context": "lab",
        }  # fmt: skip

    def write_kubeconfig(self, path: Path, pair: Pair | None = None, user: str = "lab-admin",
                         token: str | None = None) -> Path:  # fmt: skip
        path.write_text(yaml.safe_dump(self.kubeconfig(pair, user, token), sort_keys=False))
        os.chmod(path, 0o600)
        return path

    def __enter__(self) -> RealControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
