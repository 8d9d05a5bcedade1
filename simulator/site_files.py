"""The files the lab writes for the wizard: the site file (its nodes, peers and
measurements), the kubeconfig for its API server and the ``helm`` stand-in."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from simulator.lab import Lab

LAB_TOKEN = "lab-token-not-a-secret"


class SiteFiles:
    """What the wizard is given to reach the lab, as an operator would give it a site: the
    lab's ``site_files``, a collaborator that reads the lab (its API server, SSH servers and
    hosts, Kubespray checkout) and writes into its folder."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def write_kubeconfig(self) -> None:
        lab = self.lab
        assert lab.api is not None
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {"server": lab.api.url}}],
            "users": [{"name": "lab-admin", "user": {"token": LAB_TOKEN}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab-admin"}}],
            "current-context": "lab",
        }
        path = lab.directory / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        os.chmod(path, 0o600)

    def write_helm(self) -> Path:
        lab = self.lab
        bin_dir = lab.directory / "bin"
        bin_dir.mkdir(exist_ok=True)
        helm = bin_dir / "helm"
        root = Path(__file__).resolve().parents[1]
        helm.write_text(
            f"#!{sys.executable}\n"
            "# gpu-node-wizard lab: a helm stand-in that records releases in the lab.\n"
            f"import sys\nsys.path.insert(0, {str(root)!r})\n"
            "from simulator.helm_standin import main\nsys.exit(main(sys.argv[1:]))\n"
        )
        helm.chmod(helm.stat().st_mode | stat.S_IXUSR)
        return helm

    def write_site(self, key_path: Path, helm: Path) -> None:
        lab = self.lab
        nodes = []
        for name, server in lab.servers.items():
            host = lab.hosts[name]
            if host.role != "gpu":
                continue
            nodes.append(
                {
                    "name": name,
                    "host": server.address,
                    "ssh": {"port": server.port},
                    "os": host.state.os,
                    "gpu_count": host.state.gpu_count,
                    "bond": {"name": host.state.bond_name, "ports": [p.name for p in host.ports]},
                    "rdma_ip": host.state.rdma_ip,
                }
            )
        peers = [
            # The lab's peers are stand-ins that serve nobody: no production storage to
            # gate (tests/test_storage_load_gate.py turns it on).
            {"name": name, "host": server.address, "ssh": {"port": server.port},
             "rdma_ip": lab.hosts[name].state.rdma_ip, "production": False}
            for name, server in lab.servers.items()
            if lab.hosts[name].role == "peer"
        ]  # fmt: skip
        site = {
            "name": "lab",
            "ssh": {
                "user": "root",
                "key": key_path.name,
                "known_hosts": "known_hosts",
                "config": "none",
                "connect_timeout": 5.0,
                "command_timeout": 60.0,
            },
            "cluster": {
                "kubeconfig": "kubeconfig",
                "kubernetes_version": "1.33",
                "helm": str(helm),
                **(
                    {
                        "kubespray": {
                            "checkout": "kubespray",
                            "inventory": str(lab.kubespray_inventory.relative_to(lab.directory)),
                        }
                    }
                    if lab.kubespray_inventory
                    else {}
                ),
            },
            "nodes": nodes,
            "aistor": {"peers": peers},
            "registry": {"mirror": "nexus.lab.internal:8443/nvidia", "pull_secret": "nexus-pull"},
            "max_parallel_nodes": min(64, max(16, lab.nodes)),
            "measurements": {
                "duration_s": 2,
                "soak_seconds": 3,
                "aistor_tcp": {
                    "command": "warp get --host=aistor --duration=10s",
                    "metric_regex": r"Average: (?P<value>[\d.]+) GiB/s",
                    "unit": "GiB/s",
                },
                "aistor_direct": {
                    "command": "warp get --host=aistor --duration=10s --rdma",
                    "metric_regex": r"Average: (?P<value>[\d.]+) GiB/s",
                    "unit": "GiB/s",
                },
                "vllm": {
                    "command": "vllm bench serve --model lab --num-prompts 64",
                    "metric_regex": r"Output token throughput \(tok/s\):\s+(?P<value>[\d.]+)",
                    "unit": "tok/s",
                },
            },
        }
        header = (
            "# gpu-node-wizard lab site: simulated hosts on loopback, written by `lab`/`demo`.\n"
            f"# Faults: {', '.join(lab.faults) or 'none'}\n"
        )
        lab.site_path.write_text(header + yaml.safe_dump(site, sort_keys=False))
