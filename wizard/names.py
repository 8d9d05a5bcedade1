"""Validators for every name that can reach a remote command or a Kubernetes object.

The wizard shell-quotes everything it sends, but a name that is not a valid interface,
device or host name is still refused early: it is almost always a typo, and a typo in
an interface name on a production bond is exactly the mistake this tool exists to stop.
"""

from __future__ import annotations

import ipaddress
import re

# Linux IFNAMSIZ is 16 including the NUL: at most 15 characters, no '/', ':' or blanks.
# We are stricter than the kernel (no '@', '%'), which no distribution's naming uses.
_INTERFACE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")
# RDMA device names: irdma0, rocep133s0f0, mlx5_0, ib0, rxe_0 (IB_DEVICE_NAME_MAX = 64).
_RDMA_DEVICE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNIX_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?$")


def is_interface_name(name: str) -> bool:
    """A network interface name as Linux accepts it (and no shell metacharacters)."""
    return bool(_INTERFACE.match(name)) and name not in (".", "..")


def is_rdma_device_name(name: str) -> bool:
    """An RDMA device name such as ``irdma0`` or ``rocep133s0f0``."""
    return bool(_RDMA_DEVICE.match(name))


def is_ip_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def is_hostname(value: str) -> bool:
    """An IP address or an RFC 1123 host name."""
    if is_ip_address(value):
        return True
    if not value or len(value) > 253:
        return False
    return all(_HOST_LABEL.match(label) for label in value.rstrip(".").split("."))


def is_dns1123_subdomain(value: str) -> bool:
    """A Kubernetes object name (node names, namespaces, ConfigMaps)."""
    return len(value) <= 253 and bool(_DNS1123_SUBDOMAIN.match(value))


def is_label_key(key: str) -> bool:
    """A Kubernetes label or taint key: optional DNS prefix, '/', and a 63-char name."""
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns1123_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_NAME.match(value))


def is_env_var_name(name: str) -> bool:
    return bool(_ENV_VAR.match(name))


def is_unix_user(name: str) -> bool:
    return bool(_UNIX_USER.match(name))
