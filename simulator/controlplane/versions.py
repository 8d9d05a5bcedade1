"""The one place the real control plane's versions are pinned.

The cluster's minor version is 1.33 (the site file's ``cluster.kubernetes_version``), so
the control plane is built from ``k8s.io/kubernetes`` at the newest 1.33 patch the module
proxy serves; its staging modules (k8s.io/api, client-go, apiserver...) are published as
v0.33.x and replace the module's ``./staging/src`` paths. etcd 3.5 is the line Kubernetes
1.33 is validated with (cmd/kubeadm/app/constants: etcd 3.5.x for 1.33). Helm is v3 (the
wizard drives ``helm upgrade --install``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Component:
    """One Go module to build, and the commands in it that become binaries."""

    name: str  # the cache folder's prefix: <name>-<version>
    module: str
    version: str
    packages: tuple[str, ...]  # import paths of the main packages; binaries take the last part
    ldflags: tuple[str, ...] = ()
    # How a dependency the module replaces with a local path (its monorepo's siblings) is
    # found instead: the published version its go.mod requires, or this when that is v0.0.0.
    sibling_version: str | None = None
    binaries: tuple[str, ...] = field(default=())

    def binary_names(self) -> tuple[str, ...]:
        return self.binaries or tuple(p.rsplit("/", 1)[-1] for p in self.packages)

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


KUBERNETES_VERSION = "v1.33.13"
STAGING_VERSION = "v0.33.13"  # k8s.io/kubernetes v1.X.Y's staging modules are v0.X.Y
ETCD_VERSION = "v3.5.35"
HELM_VERSION = "v3.22.0"

# hack/lib/version.sh: what `make` stamps into a release build, so /version answers the
# real gitVersion rather than v0.0.0-master.
_K8S_VERSION_FLAGS = tuple(
    f"-X k8s.io/{pkg}.{name}={value}"
    for pkg in ("component-base/version", "client-go/pkg/version")
    for name, value in (
        ("gitVersion", KUBERNETES_VERSION),
        ("gitMajor", "1"),
        ("gitMinor", KUBERNETES_VERSION.split(".")[1]),
        ("gitTreeState", "clean"),
        ("buildDate", "2026-01-01T00:00:00Z"),
    )
)

KUBERNETES = Component(
    name="kubernetes",
    module="k8s.io/kubernetes",
    version=KUBERNETES_VERSION,
    packages=(
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
    ),
    ldflags=_K8S_VERSION_FLAGS,
    sibling_version=STAGING_VERSION,
)

# kubectl from the same module and version as the API server (the version skew policy
# allows kubectl within one minor of it; Debian bookworm's kubernetes-client is 1.20). A
# component of its own, so its cache folder and stamp are its own: adding it builds it
# alone, never the server binaries again (Go's build cache shares the common packages).
KUBECTL = Component(
    name="kubectl",
    module="k8s.io/kubernetes",
    version=KUBERNETES_VERSION,
    packages=("k8s.io/kubernetes/cmd/kubectl",),
    ldflags=_K8S_VERSION_FLAGS,
    sibling_version=STAGING_VERSION,
)

ETCD = Component(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    version=ETCD_VERSION,
    packages=("go.etcd.io/etcd/server/v3",),
    binaries=("etcd",),
)

HELM = Component(
    name="helm",
    module="helm.sh/helm/v3",
    version=HELM_VERSION,
    packages=("helm.sh/helm/v3/cmd/helm",),
    # internal/version/version.go: `helm version` reports this.
    ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
)

COMPONENTS: tuple[Component, ...] = (ETCD, KUBERNETES, HELM, KUBECTL)
