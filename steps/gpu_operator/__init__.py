"""Phase 8, GPU Operator 26.7 through Helm (T01).

``values`` builds the chart values, the NVIDIADriver resource and the image list as data;
``release`` reads what the cluster runs and merges values; ``install`` is the release step
(safe by default on a cluster that already runs the operator); ``phase`` holds the
preflight, the verification and the phase.
"""

from steps.gpu_operator.phase import (
    PHASE,
    InstallGpuOperator,
    OperatorPreflight,
    VerifyGpuOperator,
    evaluate_pods,
    gpu_test_pod,
    run_test_pod,
)
from steps.gpu_operator.values import (
    CHART,
    IMAGES_V26_7_0,
    NAMESPACE,
    RELEASE,
    Image,
    build_values,
    image_list,
    mirror_ref,
    mirrored,
    nvidia_driver_resource,
    os_tag,
    values_yaml,
)

__all__ = [
    "CHART",
    "IMAGES_V26_7_0",
    "NAMESPACE",
    "PHASE",
    "RELEASE",
    "Image",
    "InstallGpuOperator",
    "OperatorPreflight",
    "VerifyGpuOperator",
    "build_values",
    "evaluate_pods",
    "gpu_test_pod",
    "image_list",
    "mirror_ref",
    "mirrored",
    "nvidia_driver_resource",
    "os_tag",
    "run_test_pod",
    "values_yaml",
]
