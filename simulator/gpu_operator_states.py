"""The GPU Operator's operand states, and the labels its controller puts on each GPU node
it manages, in one place: the real control plane's operator (controlplane/vendors.py)
writes them, and the existing cluster (existing.py) already carries them on the H100 node
the operator has been serving, as a cluster running the operator does.

Source: NVIDIA/gpu-operator controllers/object_controls.go (the states and their
DaemonSets' names) and controllers/state_manager.go labelGPUNodes (``gpu.present`` and one
``gpu.deploy.<state>`` label per operand, which each operand DaemonSet's nodeSelector reads).
"""

from __future__ import annotations

OPERANDS = {
    "driver": "nvidia-driver-daemonset",
    "container-toolkit": "nvidia-container-toolkit-daemonset",
    "device-plugin": "nvidia-device-plugin-daemonset",
    "dcgm": "nvidia-dcgm",
    "dcgm-exporter": "nvidia-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "operator-validator": "nvidia-operator-validator",
}


def gpu_node_labels() -> dict[str, str]:
    """labelGPUNodes: the present label and each operand state's deploy label."""
    labels = {"nvidia.com/gpu.present": "true"}
    labels.update({f"nvidia.com/gpu.deploy.{state}": "true" for state in OPERANDS})
    return labels
