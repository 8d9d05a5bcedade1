"""The real control plane's PKI, generated per lab: what kubeadm writes into
/etc/kubernetes/pki (cmd/kubeadm/app/phases/certs: the cluster CA, the API server's serving
certificate with the service and loopback names, its kubelet client, the admin's
``system:masters`` client, the controller-manager's and scheduler's clients, the service
account key pair) plus a serving certificate for the lab's kubelet endpoint and each lab
kubelet's own client certificate (``node``), and etcd's own CA, serving certificate and
the API server's client certificate for it."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# pkg/controlplane: the first address of --service-cluster-ip-range is the
# `kubernetes` Service's ClusterIP, which the serving certificate must name.
SERVICE_RANGE = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
VALID = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    os.chmod(path, 0o600)
    return path


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass
class Pki:
    """Every certificate the control plane and the lab's kubelets use, in ``folder``."""

    folder: Path

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        self._now = now
        self._ca_key, self._ca_name, self.ca = self._authority("gpu-node-wizard-lab-ca", "ca")
        self.ca_key = _write(self.folder / "ca.key", _pem_key(self._ca_key))
        loopback = ["127.0.0.1", "::1"]
        names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local"]  # fmt: skip
        self.apiserver = self.issue("apiserver", "kube-apiserver", server=names,
                                    ips=[*loopback, SERVICE_IP])  # fmt: skip
        self.kubelet_client = self.issue(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", orgs=["system:masters"]
        )
        self.admin = self.issue("admin", "lab-admin", orgs=["system:masters"])
        self.controller_manager = self.issue("controller-manager", "system:kube-controller-manager")
        self.scheduler = self.issue("scheduler", "system:kube-scheduler")
        self.kubelet_serving = self.issue(
            "kubelet", "lab-kubelet", server=["localhost"], ips=loopback
        )
        self._etcd(loopback)
        # The service account token signer (kubeadm: sa.key / sa.pub, RSA).
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = _write(self.folder / "sa.key", _pem_key(sa))
        self.sa_pub = _write(
            self.folder / "sa.pub",
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

    def _etcd(self, loopback: list[str]) -> None:
        """kubeadm's etcd PKI (phases/certs: etcd/ca, etcd/server, apiserver-etcd-client):
        its own CA, so that no cluster certificate (a kubelet's, the admin's) opens etcd,
        which asks every client for a certificate of that CA."""
        key, name, self.etcd_ca = self._authority("gpu-node-wizard-lab-etcd-ca", "etcd-ca")
        by = (key, name)
        self.etcd_server = self.issue(
            "etcd-server", "lab-etcd", server=["localhost"], ips=loopback, signer=by
        )
        self.etcd_client = self.issue(
            "apiserver-etcd-client", "kube-apiserver-etcd-client", signer=by
        )

    def _authority(self, common_name: str, stem: str) -> tuple[Any, x509.Name, Path]:
        """A self-signed CA: its key, its name and its certificate's file."""
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return (
            key,
            name,
            _write(self.folder / f"{stem}.crt", ca.public_bytes(serialization.Encoding.PEM)),
        )

    def node(self, name: str) -> Pair:
        """A kubelet's client certificate, as the kubelet's TLS bootstrap gets it signed
        (kubeadm join; Kubespray): CN ``system:node:NAME`` in ``system:nodes``, the identity
        the Node authorizer and the NodeRestriction admission plugin confine to that node."""
        return self.issue(f"node-{name}", f"system:node:{name}", orgs=["system:nodes"])

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        orgs: list[str] | None = None,
        server: list[str] | None = None,
        ips: list[str] | None = None,
        signer: tuple[Any, x509.Name] | None = None,
    ) -> Pair:
        """A certificate of the cluster CA (or of ``signer``, another CA's key and name)."""
        ca_key, ca_name = signer or (self._ca_key, self._ca_name)
        key = _key()
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs or []]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server is not None or ips is not None:
            usages = [ExtendedKeyUsageOID.SERVER_AUTH]
            alt = [x509.DNSName(n) for n in server or []]
            alt += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips or []]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return Pair(
            _write(self.folder / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            _write(self.folder / f"{stem}.key", _pem_key(key)),
        )
