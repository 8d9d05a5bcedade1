"""A stateful simulated host: a RHEL 10.2 B300x8 node (or an AIStor peer) with two E810
ports in bond1, answering the commands the wizard's probes send, in the real formats.

State changes the way the real host's would: ``modprobe irdma`` changes ``lsmod``, ``dcb
... set`` changes ``dcb ... show``, writing a file changes ``cat``, ``systemctl reboot``
gives a new boot id. The output formats follow the samples in ``../shared/fixtures``.

A package of one job per module: ``model`` (what the machine is made of: its ports, its
fixed versions, a command's result), ``machine`` (``HostState``: its state and what is
derived from it; ``LabHost``: the state with its collaborators), ``dispatch``
(``CommandDispatch``: a command line to its handler, as a shell would), and the
collaborators that answer by subject, each given the state and the few collaborators it
talks to: ``system`` (``SystemInfo``: identity and packages), ``files`` (``HostFiles``:
files, configfs and systemd), ``pci`` (``HostPci``: PCI, IOMMU and GPUs), ``nic``
(``HostNic``: ethtool, ip, bonding, dcb) and ``rdma`` (``HostRdma``: kernel modules and
RDMA devices). The bond's manager and the module loading are ``HostNetwork``
(``simulator/network.py``) and ``KernelModules`` (``simulator/kmod.py``).
"""

from simulator.host.machine import HostState, LabHost
from simulator.host.model import Port, Result

__all__ = ["HostState", "LabHost", "Port", "Result"]
