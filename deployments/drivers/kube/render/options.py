"""What every renderer is given besides the endpoint and its revision: the cluster's settings
(and the installation's benchmark and quantization images).

Its own module, below every family, because the package's ``__init__`` imports the families and
they all take it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deployments.cluster_settings import ClusterSettings


@dataclass(frozen=True)
class KubeOptions:
    """Per-cluster choices an operator makes once."""

    # What the cluster's admin saved (GPU map, tolerations, images, model cache, fences, extra
    # labels): validated when saved, so rendering never needs to refuse it. The platform
    # namespace is where k8s/base runs the gateway and worker (labelled
    # app.kubernetes.io/component=gateway|worker).
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    # The installation's default AIPerf image for benchmark Jobs (PLINTH_BENCHMARK_IMAGE, as set:
    # checked when a benchmark runs, so a mistake in it fails benchmarks only); "": Plinth's.
    benchmark_image: str = ""
    # The installation's image for quantization Jobs (PLINTH_QUANTIZE_IMAGE); "": Plinth's.
    quantize_image: str = ""
