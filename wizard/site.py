"""The site file (``site.yaml``): what the operator tells the wizard about the site.

Validated on load with pydantic. Unknown keys are errors (a typo such as ``pfc_prioritys``
must not silently fall back to a default on a production bond), and every error names the
field path, the bad value and what is allowed. Secrets never live here: SSH keys are
referenced by path, registry credentials by the name of an environment variable.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from wizard import names, yamlfile
from wizard.errors import SiteError

SUPPORTED_OS = ("rhel-10.2", "ubuntu-24.04")
NIC_PROFILES = ("intel-e810", "connectx")
KERNEL_MODULE_TYPES = ("auto", "open", "proprietary")
# k8s-rdma-shared-dev-plugin before 1.5.2 required 'issm' devices and so rejected Intel NICs.
MIN_RDMA_PLUGIN_VERSION = (1, 5, 2)


def _check(predicate: Any, what: str) -> Any:
    def validate(value: Any) -> Any:
        if not predicate(value):
            raise ValueError(f"{value!r} is not a valid {what}")
        return value

    return AfterValidator(validate)


InterfaceName = Annotated[str, _check(names.is_interface_name, "interface name")]
HostName = Annotated[str, _check(names.is_hostname, "host name or IP address")]
IpAddress = Annotated[str, _check(names.is_ip_address, "IP address")]
K8sName = Annotated[str, _check(names.is_dns1123_subdomain, "Kubernetes name (DNS-1123)")]
EnvVarName = Annotated[str, _check(names.is_env_var_name, "environment variable name")]
UnixUser = Annotated[str, _check(names.is_unix_user, "user name")]


def _is_path(value: str) -> bool:
    """A path the OS can take: no NUL or other control character, at most PATH_MAX (4096)
    bytes and NAME_MAX (255) per component. Anything else fails later at open() with a
    ValueError or ENAMETOOLONG deep inside a transport; here it names the field."""
    raw = value.encode("utf-8", "surrogateescape")
    return (
        0 < len(raw) <= 4096
        and not any(ch < 0x20 or ch == 0x7F for ch in raw)
        and all(len(part) <= 255 for part in raw.split(b"/"))
    )


FilePath = Annotated[str, _check(_is_path, "path (no control characters, at most 4096 bytes)")]
Version3 = Annotated[str, Field(pattern=r"^v?\d+\.\d+\.\d+$")]
MinorVersion = Annotated[str, Field(pattern=r"^\d+\.\d+$")]


class Strict(BaseModel):
    """Base of every site section: unknown keys are refused, values are not coerced."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SshSettings(Strict):
    """How to reach a host. Every field may be set once under the top-level ``ssh``."""

    user: UnixUser = "root"
    port: int = Field(22, ge=1, le=65535)
    key: FilePath | None = Field(None, description="path to the private key; the agent if unset")
    key_passphrase_env: EnvVarName | None = Field(
        None,
        description="an environment variable holding ssh.key's passphrase; without it a "
        "locked key goes through the ssh-agent or a terminal prompt",
    )
    known_hosts: FilePath = "~/.ssh/known_hosts"
    trust_on_first_use: bool = Field(
        False, description="accept and record an unknown host key (a changed key is refused)"
    )
    proxy_jump: str | None = Field(None, pattern=r"^([a-z_][a-z0-9_.-]*@)?[A-Za-z0-9.:\[\]-]+$")
    sudo: bool | None = Field(
        None, description="run as root through 'sudo -n'; default: user!=root"
    )
    config: FilePath | None = Field(
        None, description="OpenSSH client config to read; default ~/.ssh/config; 'none': none"
    )
    connect_timeout: float = Field(15.0, gt=0, le=600)
    command_timeout: float = Field(600.0, gt=0, le=86400)

    @property
    def use_sudo(self) -> bool:
        return self.user != "root" if self.sudo is None else self.sudo


class Bond(Strict):
    """The cluster-internal bond. Both ports must be the two ports of the same E810."""

    name: InterfaceName = "bond1"
    ports: Annotated[list[InterfaceName], Field(min_length=2, max_length=2)]
    mode: Literal["802.3ad"] = "802.3ad"
    xmit_hash_policy: Literal["layer3+4", "layer2+3", "layer2"] = "layer3+4"

    @field_validator("ports")
    @classmethod
    def _distinct_ports(cls, ports: list[str]) -> list[str]:
        if len(set(ports)) != len(ports):
            raise ValueError(f"{ports!r}: the two bond ports must be different interfaces")
        return ports


class Node(Strict):
    """A GPU node to add to the cluster."""

    name: K8sName = Field(description="the Kubernetes node name")
    host: HostName = Field(description="address the wizard reaches over SSH")
    oob_host: HostName | None = Field(
        None, description="out-of-band address, used when the SSH path runs over the bond"
    )
    ssh: SshSettings = SshSettings()
    os: Literal["rhel-10.2", "ubuntu-24.04"] = "rhel-10.2"
    gpu_count: int = Field(8, ge=1, le=16)
    gpu_model: str = Field("B300", pattern=r"^[A-Za-z0-9 .-]{1,40}$")
    bond: Bond
    rdma_ip: IpAddress = Field(description="this node's address on the bond (RoCEv2 GID)")


class AIStorPeer(Strict):
    """A node of the AIStor cluster: the far end of host-to-host RDMA tests."""

    name: Annotated[str, _check(names.is_hostname, "peer name")]
    host: HostName
    ssh: SshSettings = SshSettings()
    rdma_ip: IpAddress
    rdma_device: Annotated[str, _check(names.is_rdma_device_name, "RDMA device name")] | None = None
    production: bool = Field(
        True,
        description="the peer serves production storage: every measurement that loads it "
        "(line-rate perftest, iperf3 -P, the soak, the AIStor benchmarks) needs a typed "
        "confirmation naming it (headless: --allow-storage-load NAME) and is capped at "
        "aistor.load_max_seconds",
    )


class AIStor(Strict):
    peers: list[AIStorPeer] = Field(default_factory=list)
    load_max_seconds: int = Field(
        300,
        ge=1,
        le=7 * 86400,
        description="the longest load run against a production peer (the soak included): "
        "five minutes by default, which a production AIStor node rides out",
    )
    load_rate_gbps: float = Field(
        25.0,
        gt=0,
        le=400,
        description="the most bandwidth (Gb/s) one load run may put on a production peer: "
        "perftest's bandwidth tests get --rate_limit (software limiter, which paces the "
        "whole process whatever its QP count) and iperf3 -b (split over its streams); T09 "
        "runs both at once with half each; 25 Gb/s by default, a quarter of one 100G port, "
        "which leaves a production AIStor node its clients",
    )
    support_confirmation: Annotated[str, Field(min_length=3, max_length=500)] | None = Field(
        None,
        description="who confirmed, and where (ticket, mail), that AIStor and NVIDIA support "
        "this AIStor version over Intel E810 RoCEv2 with GPUDirect RDMA: a precondition of "
        "the build (seed 002 section 1.2)",
    )


class Kubespray(Strict):
    """The operator's Kubespray checkout: with it the wizard runs the join itself."""

    checkout: str = Field(description="the Kubespray checkout folder (v2.29.1)")
    inventory: str = Field(description="the cluster's inventory hosts.yaml (YAML form)")


class Cluster(Strict):
    kubeconfig: FilePath = "~/.kube/config"
    context: str | None = Field(None, pattern=r"^[^\s]{1,253}$")
    kubernetes_version: MinorVersion = "1.33"
    helm: FilePath = Field("helm", description="the helm binary (a name on PATH or a path)")
    containerd_config: FilePath | None = Field(
        None,
        description="containerd config path when it is not Kubespray's /etc/containerd/config.toml",
    )
    containerd_socket: FilePath | None = Field(
        None, description="containerd socket when it is not /run/containerd/containerd.sock"
    )
    existing_workers: list[K8sName] = Field(
        default_factory=list,
        description="CPU workers to compare kernel/OS with; empty: every other Ready worker",
    )
    kubespray: Kubespray | None = Field(
        None, description="the Kubespray checkout and inventory; unset: the join is manual"
    )


class Versions(Strict):
    gpu_operator: Version3 = "v26.7.0"
    driver: Annotated[str, Field(pattern=r"^\d+\.\d+(\.\d+)?$")] = "595.91.07"
    kernel_module_type: Literal["auto", "open", "proprietary"] = Field(
        "auto",
        description="auto (the chart's default) picks the open modules a B300 needs for "
        "DMA-BUF GPUDirect; open or proprietary is set for every GPU node of the cluster "
        "(without the NVIDIADriver CRD)",
    )
    nvidia_driver_crd: bool = Field(False, description="manage the driver with NVIDIADriver CRs")
    cdi: bool = True


class Registry(Strict):
    """The internal mirror every image is pulled from (air-gapped sites)."""

    mirror: str | None = Field(None, pattern=r"^[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._/-]+)?$")
    pull_secret: K8sName | None = Field(None, description="Kubernetes Secret for imagePullSecrets")
    username_env: EnvVarName | None = None
    password_env: EnvVarName | None = None
    gpu_operator_chart: str = Field(
        "nvidia/gpu-operator",
        pattern=r"^(oci://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._-]+)+|[a-z0-9][a-z0-9._-]*/gpu-operator)$",
        description="the GPU Operator chart as helm finds it: <repo>/gpu-operator of a "
        "`helm repo add`ed repository (an air gap's own mirror of NVIDIA's) or "
        "oci://<registry>/<path>/gpu-operator; checked with `helm show chart` before use",
    )


class Nic(Strict):
    profile: Literal["intel-e810", "connectx"] = "intel-e810"
    min_firmware: Annotated[str, Field(pattern=r"^\d+\.\d+$")] | None = Field(
        None, description="lowest acceptable NVM version (e.g. 4.40): below it warns"
    )


class DevicePlugin(Strict):
    resource_name: Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$")] = "rdma/e810"
    rdma_hca_max: int = Field(64, ge=1, le=10000)
    image: str = Field(
        "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin",
        pattern=r"^[a-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)+$",
        description="the plugin image without a tag (the tag is device_plugin.version); "
        "pulled through registry.mirror when set",
    )
    version: Version3 = "v1.5.3"
    namespace: K8sName = "kube-system"

    @field_validator("version")
    @classmethod
    def _recent_enough(cls, version: str) -> str:
        parts = tuple(int(p) for p in version.lstrip("v").split("."))
        if parts < MIN_RDMA_PLUGIN_VERSION:
            raise ValueError(
                f"{version!r} is too old: versions before 1.5.2 require 'issm' devices and "
                "reject Intel NICs; use v1.5.2 or later"
            )
        return version


class QoS(Strict):
    """RoCEv2 traffic: DSCP 24 (ToS 96) -> priority 3 -> TC3 with PFC on priority 3 only."""

    dscp: int = Field(24, ge=0, le=63)
    tos: int | None = Field(None, ge=0, le=255, description="default: dscp x 4")
    priority: int = Field(3, ge=0, le=7)
    traffic_class: int = Field(3, ge=0, le=7)
    pfc_priorities: list[Annotated[int, Field(ge=0, le=7)]] = Field(default_factory=lambda: [3])
    ecn: bool = Field(False, description="ECN is turned on in its own phase, after PFC works")
    roce_bandwidth_percent: int = Field(
        50,
        ge=1,
        le=99,
        description="the RoCE traffic class's guaranteed share of ETS bandwidth (TC0 gets the rest)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> QoS:
        if self.tos is not None and self.tos != self.dscp * 4:
            raise ValueError(
                f"tos {self.tos} does not match dscp {self.dscp}: ToS = DSCP x 4 = {self.dscp * 4}"
            )
        if self.priority not in self.pfc_priorities:
            raise ValueError(
                f"pfc_priorities {self.pfc_priorities} must include the RoCE priority "
                f"{self.priority}, or RoCE traffic is not lossless"
            )
        if len(set(self.pfc_priorities)) != len(self.pfc_priorities):
            raise ValueError(f"pfc_priorities {self.pfc_priorities} lists a priority twice")
        return self

    @property
    def roce_tos(self) -> int:
        return self.dscp * 4 if self.tos is None else self.tos


class Benchmark(Strict):
    """An operator-configured benchmark command (AIStor S3 client, vLLM serving benchmark)."""

    command: str = Field(description="run on the GPU node; its output is recorded")
    metric_regex: str = Field(
        description="a regex with a (?P<value>...) group picking the headline number from the output"
    )
    unit: str = "GB/s"

    @field_validator("metric_regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a valid regex: {exc}") from None
        if "value" not in pattern.groupindex:
            raise ValueError(f"{value!r} needs a (?P<value>...) group")
        return value


class Measurements(Strict):
    perftest_port: int = Field(18515, ge=1024, le=65000)
    iperf3_port: int = Field(5201, ge=1024, le=65000)
    tcp_streams: int = Field(8, ge=1, le=128)
    duration_s: int = Field(10, ge=1, le=3600)
    soak_seconds: int = Field(1800, ge=1, le=7 * 86400)
    min_line_rate_percent: int = Field(
        80, ge=1, le=100, description="below this % of line rate warns"
    )
    nccl_tests_image: str = (
        "ghcr.io/coreweave/nccl-tests:12.9.1-devel-ubuntu22.04-nccl2.27.5-1-0120901"
    )
    nccl_tests_dir: str = Field(
        "/opt/nccl-tests/build",
        pattern=r"^/[A-Za-z0-9._/-]{0,200}$",
        description="where nccl_tests_image keeps all_reduce_perf (not on the image's PATH: "
        "coreweave/nccl-tests builds it under its WORKDIR /opt/nccl-tests)",
    )
    rdma_test_image: str = Field(
        # The RDMA device plugin README's example image, mellanox/rping-test, is published
        # as :latest only. The pod needs ibv_devinfo, which the nccl-tests image carries
        # (coreweave/nccl-tests Dockerfile.ubuntu22 at the tag's commit 0120901: apt-get
        # install ibverbs-utils ... from the MLNX_OFED repository), and the site pulls that
        # image for its measurements anyway: no image more to mirror.
        "ghcr.io/coreweave/nccl-tests:12.9.1-devel-ubuntu22.04-nccl2.27.5-1-0120901",
        description="the image of the pod that lists the RDMA device through the plugin "
        "(ibv_devinfo; rdma link too where the image has iproute2), pinned by tag or digest",
    )
    cuda_perftest_image: str = Field(
        # The nccl-tests image builds perftest with CUDA (coreweave/nccl-tests Dockerfile,
        # stage "perftest": ./configure CUDA_H_PATH=..., installed under /usr/local/bin).
        "ghcr.io/coreweave/nccl-tests:12.9.1-devel-ubuntu22.04-nccl2.27.5-1-0120901",
        description="an image with perftest built with CUDA (--use_cuda, --use_cuda_dmabuf), "
        "pinned by tag or digest (a measurement must be repeatable: never :latest)",
    )
    pair_nodes: bool = Field(
        False,
        description="measure the new GPU nodes against each other in disjoint pairs instead "
        "of taking turns on the AIStor peers (when the nodes may carry test traffic between "
        "them): a fleet's measurement phase then takes two waves",
    )
    nccl_peer_nodes: list[K8sName] = Field(
        default_factory=list,
        description="GPU nodes already in the cluster that the inter-node NCCL run may use "
        "with the new nodes (one node alone cannot prove the network path)",
    )
    aistor_tcp: Benchmark | None = None
    aistor_direct: Benchmark | None = None
    vllm: Benchmark | None = None

    @field_validator("nccl_tests_image", "cuda_perftest_image", "rdma_test_image")
    @classmethod
    def _pinned(cls, value: str) -> str:
        """The proof's images by tag or digest: ``:latest`` or no tag can change between
        the run and its repetition (and differ between nodes)."""
        name, _, digest = value.partition("@")
        tag = name.rsplit("/", 1)[-1].partition(":")[2]
        if digest or (tag and tag != "latest"):
            return value
        raise ValueError(f"{value!r} is not pinned: give a tag other than latest, or @sha256:...")


_PERCENT = re.compile(r"(100|[1-9][0-9]?)%")


def _node_share(minimum: int) -> Any:
    """A node count (``minimum``..256) or a percentage of the GPU nodes as Ansible's
    ``serial`` writes it ("25%"), with one error that says both forms."""

    def validate(value: Any) -> int | str:
        if isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= 256:
            return value
        if isinstance(value, str) and _PERCENT.fullmatch(value.strip()):
            return value.strip()
        raise ValueError(
            f"{value!r} is neither a node count ({minimum}-256) nor a percentage of the GPU "
            "nodes such as '25%' (1%-100%)"
        )

    return PlainValidator(validate, json_schema_input_type=int | str)


def _share(value: int | str, total: int) -> int:
    """Nodes in a share: a count as is, a percentage of ``total`` rounded down (like Ansible's
    serial)."""
    if isinstance(value, int):
        return value
    return total * int(value.rstrip("%")) // 100


class Rollout(Strict):
    """How changes roll across many nodes (read-only checks always run on all at once).

    Batch sizes and the failure limit are a node count or a percentage of the GPU nodes
    ("25%"); a percentage batch is at least one node.
    """

    maintenance_batch: Annotated[int | str, _node_share(1)] = Field(
        1, description="nodes per maintenance batch, each behind its own window gate"
    )
    apply_batch: Annotated[int | str, _node_share(0)] = Field(
        0, description="nodes per apply batch; 0 = all at once"
    )
    max_failed_nodes: Annotated[int | str, _node_share(0)] = Field(
        0, description="stop the rollout once more nodes than this failed a change"
    )

    def maintenance_size(self, total: int) -> int:
        return max(1, _share(self.maintenance_batch, total))

    def apply_size(self, total: int) -> int:
        return max(1, _share(self.apply_batch, total)) if self.apply_batch else max(1, total)

    def failure_limit(self, total: int) -> int:
        """How many nodes may fail a change before the rest of the rollout is blocked."""
        return _share(self.max_failed_nodes, total)


class Taint(Strict):
    enabled: bool = False
    key: Annotated[str, _check(names.is_label_key, "taint key")] = "accelerator"
    value: Annotated[str, _check(names.is_label_value, "taint value")] = "nvidia-b300"
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not names.is_label_key(key):
            raise ValueError(f"{key!r} is not a valid label key")
        if not names.is_label_value(value):
            raise ValueError(f"label {key}: {value!r} is not a valid label value")
    return labels


class Site(Strict):
    """The whole site file."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
    ssh: SshSettings = Field(SshSettings(), description="defaults for every node and peer")
    cluster: Cluster = Cluster()
    nodes: Annotated[list[Node], Field(min_length=1)]
    aistor: AIStor = AIStor()
    versions: Versions = Versions()
    registry: Registry = Registry()
    nic: Nic = Nic()
    device_plugin: DevicePlugin = DevicePlugin()
    qos: QoS = QoS()
    labels: Annotated[dict[str, str], AfterValidator(_check_labels)] = Field(
        default_factory=lambda: {"accelerator": "nvidia-b300"}
    )
    taint: Taint = Taint()
    measurements: Measurements = Measurements()
    rollout: Rollout = Rollout()
    max_parallel_nodes: int = Field(16, ge=1, le=256, description="nodes probed at once")

    _source: Path | None = PrivateAttr(default=None)
    _by_name: tuple[list[Node], dict[str, Node]] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _apply_ssh_defaults(cls, data: Any) -> Any:
        """Fill each node's and peer's ``ssh`` from the top-level ``ssh`` defaults."""
        if not isinstance(data, dict):
            return data
        # A section left empty (`registry:` with every line commented) means "defaults".
        data = {k: v for k, v in data.items() if not (v is None and k in _SECTIONS)}
        if not isinstance(data.get("ssh", {}), dict):
            return data
        defaults = data.get("ssh") or {}
        data["nodes"] = _merge_ssh(data.get("nodes"), defaults)
        aistor = data.get("aistor")
        if isinstance(aistor, dict) and isinstance(aistor.get("peers"), list):
            data["aistor"] = {**aistor, "peers": _merge_ssh(aistor["peers"], defaults)}
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> Site:
        for what, values in (
            ("nodes[].name", [n.name for n in self.nodes]),
            ("nodes[].host", [n.host for n in self.nodes]),
            ("nodes[].rdma_ip", [n.rdma_ip for n in self.nodes]),
            ("aistor.peers[].name", [p.name for p in self.aistor.peers]),
        ):
            duplicates = sorted({v for v in values if values.count(v) > 1})
            if duplicates:
                raise ValueError(f"{what} must be unique; repeated: {', '.join(duplicates)}")
        if self.nic.profile == "intel-e810":
            if len(self.qos.pfc_priorities) > 1:
                raise ValueError(
                    f"qos.pfc_priorities {self.qos.pfc_priorities}: an E810 port supports one "
                    "lossless (PFC) traffic class"
                )
            if self.qos.traffic_class != self.qos.priority:
                raise ValueError(
                    f"qos.traffic_class {self.qos.traffic_class} must equal qos.priority "
                    f"{self.qos.priority}: in the E810's DSCP mode priority maps 1:1 to TC"
                )
        if (self.registry.username_env is None) != (self.registry.password_env is None):
            raise ValueError("registry.username_env and registry.password_env go together")
        total = len(self.nodes)
        if total > 1 and self.rollout.maintenance_size(total) >= total:
            raise ValueError(
                f"rollout.maintenance_batch {self.rollout.maintenance_batch!r} takes all "
                f"{total} nodes at once: a maintenance window drains and re-bonds its nodes, "
                f"so at most {total - 1} may be in one batch"
            )
        return self

    # -- derived values ---------------------------------------------------------------

    @property
    def source(self) -> Path | None:
        """The file this site was loaded from, if any."""
        return self._source

    def resolve_path(self, value: str) -> Path:
        """A path from the site file: ``~`` expanded, relative to the site file's folder."""
        path = Path(os.path.expanduser(value))
        if not path.is_absolute() and self._source is not None:
            path = self._source.parent / path
        return path

    def node(self, name: str) -> Node:
        """The node called ``name``. The engine asks once per step and node, so a scan of the
        list would cost O(nodes) each time, O(nodes^2) a run: the index is built once per
        list of nodes (a copy with other nodes, or a list changed in place, rebuilds it)."""
        index = self._by_name
        if index is None or index[0] is not self.nodes or len(index[1]) != len(self.nodes):
            index = (self.nodes, {n.name: n for n in self.nodes})
            self._by_name = index
        try:
            return index[1][name]
        except KeyError:
            raise KeyError(name) from None

    def secret_values(self) -> list[str]:
        """Every secret value the site's run handles, for the redactor (wizard/secrets.py):
        environment variables it names, kubeconfig credentials, benchmark flags."""
        from wizard.secrets import site_secrets

        return site_secrets(self)

    def canonical(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def fingerprint(self) -> str:
        return _digest(self.canonical())

    def sections(self) -> dict[str, str]:
        """A digest per section, so that a changed site invalidates only what it must.

        Top-level keys are sections (``qos``, ``versions``...); each node contributes one
        section per field (``nodes.gpu-1.bond``), each peer one (``aistor.peer-1``).
        """
        data = self.canonical()
        result: dict[str, str] = {}
        for key, value in data.items():
            if key == "nodes":
                for node in value:
                    for field, field_value in node.items():
                        result[f"nodes.{node['name']}.{field}"] = _digest(field_value)
            elif key == "aistor":
                for peer in value["peers"]:
                    result[f"aistor.{peer['name']}"] = _digest(peer)
                result["aistor"] = _digest(sorted(p["name"] for p in value["peers"]))
            else:
                result[key] = _digest(value)
        return result


_SECTIONS = (
    "ssh",
    "cluster",
    "aistor",
    "versions",
    "registry",
    "nic",
    "device_plugin",
    "qos",
    "taint",
)


def _merge_ssh(entries: Any, defaults: dict[str, Any]) -> Any:
    if not isinstance(entries, list):
        return entries
    merged = []
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("ssh", {}), dict):
            entry = {**entry, "ssh": {**defaults, **(entry.get("ssh") or {})}}
        merged.append(entry)
    return merged


def _digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def json_schema() -> dict[str, Any]:
    """The site file's JSON Schema (draft 2020-12), from the model that validates it.

    The model stays the authority: cross-field rules (unique node names, DSCP vs ToS, a
    maintenance batch smaller than the fleet) and the name checks are enforced on load,
    the schema gives an editor the keys, types, ranges, patterns and descriptions.
    """
    schema = Site.model_json_schema()
    for section in _SECTIONS:  # an empty section (every line commented) means defaults
        prop = schema["properties"][section]
        schema["properties"][section] = {
            **{k: v for k, v in prop.items() if k != "$ref"},
            "anyOf": [{"$ref": prop["$ref"]}, {"type": "null"}],
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gpu-node-wizard/site.schema.json",
        **schema,
        "title": "gpu-node-wizard site file",
    }


# -- loading

_SECRET_KEY_HINT = re.compile(r"pass|secret|token|credential|private", re.IGNORECASE)


def load_site(path: str | Path) -> Site:
    """Read and validate a site file; raise ``SiteError`` naming every bad field."""
    path = Path(path)
    try:
        text = yamlfile.read_text(path)
    except yamlfile.YamlFileError as exc:
        raise SiteError(_shown_path(path), [str(exc)]) from None
    site = parse_site(text, _shown_path(path))
    site._source = path.resolve()
    return site


def parse_site(text: str, label: str = "site.yaml") -> Site:
    """Validate site-file text; ``label`` names it in error messages."""
    try:
        data = yamlfile.loads(text)
    except yamlfile.YamlFileError as exc:
        raise SiteError(label, [str(exc)]) from None
    if data is None:
        raise SiteError(label, ["the file is empty; `gpu-node-wizard init` writes an example"])
    if not isinstance(data, dict):
        raise SiteError(label, [f"the top level must be a mapping, not {type(data).__name__}"])
    try:
        return Site.model_validate(data)
    except ValidationError as exc:
        raise SiteError(label, [_describe(err) for err in exc.errors()]) from None


def _shown_path(path: Path) -> str:
    """A path for a message: printable and of reasonable length whatever it holds."""
    text = repr(str(path))[1:-1]
    return text if len(text) <= 200 else text[:200] + "..."


def _shown(value: Any) -> str:
    """A bad value quoted in an error: at most a short prefix (a 10 MB value is not echoed)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe(error: Any) -> str:
    loc = error.get("loc", ())
    where = _path(loc) or "(top level)"
    value = error.get("input")
    if loc and str(loc[-1]).endswith("_env"):
        # An environment variable's *name* belongs here; a wrong value may be the secret
        # itself, so it is never repeated.
        return (
            f"{where}: must be the name of an environment variable (letters, digits and _, "
            "not starting with a digit); the value given is not shown: if it is the "
            "password itself, remove it from the file and export it instead"
        )
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        key = loc[-1] if loc else "?"
        allowed = ", ".join(_allowed_keys(loc[:-1])) or "none"
        hint = ""
        if _SECRET_KEY_HINT.search(str(key)):
            hint = (
                "; secrets never live in the site file: name an environment variable "
                "(registry.password_env) or a key path (ssh.key)"
            )
        return f"{where}: unknown key {key!r} (allowed here: {allowed}){hint}"
    if kind == "missing":
        return f"{where}: required, but missing"
    message = error.get("msg", "invalid").removeprefix("Value error, ")
    if len(message) > 300:  # a validator's message may quote the whole (huge) value
        message = message[:300] + "... (cut)"
    if kind.startswith(("literal_error", "string_pattern", "greater", "less", "too_")):
        return f"{where}: {_shown(value)} is not allowed: {message}"
    if kind in ("value_error", "assertion_error"):
        return f"{where}: {message}"
    return f"{where}: {_shown(value)}: {message}"


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and not part.startswith(("function-", "list[", "str")):
            out += f".{part}" if out else part
    return out


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the model accepts at ``loc`` (for the unknown-key message)."""
    model: Any = Site
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = _model_in(field.annotation)
        if model is None:
            return []
    return sorted(getattr(model, "model_fields", {}))


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
