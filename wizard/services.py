"""Build the transports a site needs: SSH per node and peer, the cluster, Helm.

Kubernetes is opened lazily so that host-only commands work without a kubeconfig.
"""

from __future__ import annotations

from functools import cached_property

from wizard.site import Site, SshSettings
from wizard.transports.helm import HelmCli
from wizard.transports.kube import KubeClient
from wizard.transports.ssh import SshHost


class SiteServices:
    """What steps reach on a real (or lab) site; the Kubernetes client is made on first use.

    Duck-types ``wizard.plan.Services`` (hosts, kube, helm).
    """

    def __init__(
        self, site: Site, hosts: dict[str, SshHost], oob_hosts: dict[str, SshHost] | None = None
    ) -> None:
        self.hosts = hosts
        self.oob_hosts = oob_hosts or {}
        self._site = site
        helm = site.cluster.helm
        binary = str(site.resolve_path(helm)) if "/" in helm else helm
        self.helm = HelmCli(
            binary, str(site.resolve_path(site.cluster.kubeconfig)), site.cluster.context
        )

    @cached_property
    def _kube(self) -> KubeClient:
        return KubeClient(
            str(self._site.resolve_path(self._site.cluster.kubeconfig)), self._site.cluster.context
        )

    @property
    def kube(self) -> KubeClient:
        return self._kube

    async def close(self) -> None:
        for host in [*self.hosts.values(), *self.oob_hosts.values()]:
            await host.close()


def _ssh_host(site: Site, name: str, address: str, settings: SshSettings) -> SshHost:
    config = None
    if settings.config is not None:
        config = [] if settings.config == "none" else [str(site.resolve_path(settings.config))]
    return SshHost(
        name,
        address,
        settings,
        key_path=site.resolve_path(settings.key) if settings.key else None,
        known_hosts_path=site.resolve_path(settings.known_hosts),
        ssh_config=config,
    )


def build_services(site: Site) -> SiteServices:
    hosts = {n.name: _ssh_host(site, n.name, n.host, n.ssh) for n in site.nodes}
    for peer in site.aistor.peers:
        hosts[peer.name] = _ssh_host(site, peer.name, peer.host, peer.ssh)
    oob = {n.name: _ssh_host(site, n.name, n.oob_host, n.ssh) for n in site.nodes if n.oob_host}
    return SiteServices(site, hosts, oob)
