"""A stateful simulated host: a RHEL 10.2 B300x8 node (or an AIStor peer) with two E810
ports in bond1, answering the commands the wizard's probes send, in the real formats.

State changes the way the real host's would: ``modprobe irdma`` changes ``lsmod``, ``dcb
... set`` changes ``dcb ... show``, writing a file changes ``cat``, ``systemctl reboot``
gives a new boot id. The output formats follow the samples in ``../shared/fixtures``.

A package of one job per module: ``model`` (what the machine is made of: its ports, its
fixed versions, a command's result), ``machine`` (``LabHost``: its state and what is
derived from it), ``dispatch`` (a command line to its handler, as a shell would), and the
handlers by subject: ``system`` (identity and packages), ``files`` (files, configfs and
systemd), ``pci`` (PCI, IOMMU and GPUs), ``nic`` (ethtool, ip, bonding, dcb) and ``rdma``
(kernel modules and RDMA devices). The bond's manager and the module loading are the
mixins ``simulator/network.py`` and ``simulator/kmod.py``.
"""

from simulator.host.machine import LabHost
from simulator.host.model import Port, Result

__all__ = ["LabHost", "Port", "Result"]
