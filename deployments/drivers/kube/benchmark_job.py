"""A benchmark on Kubernetes: AIPerf as a Job in the endpoint's namespace (pure manifests).

Three objects, each labelled as Plinth's and as a benchmark of the endpoint (``L.BENCHMARK_OF``,
never the endpoint's own label, so its apply leaves them be): a Secret holding the run's temporary
inference key, a ConfigMap holding the tokenizer Plinth ships (so the pod downloads no tokenizer),
and the Job. The Job's one container runs AIPerf once per load point against the endpoint's
gateway URL, and prints each point's export as one line ``PLINTH-RESULT <index> <json>`` that the
worker reads back from the pod's log. The key reaches the container only as an environment
variable from the Secret: it is never in the manifest's args, and AIPerf redacts it in its own
logs.

Where AIPerf comes from is the cluster's ``benchmark_aiperf`` setting. By default an image with
``aiperf`` on its PATH (the cluster's, else the platform's, else Plinth's own, pinned to
``deployments.aiperf.AIPERF_VERSION``): the pod then talks to nothing but the gateway, so a
benchmark runs on a cluster that reaches no package index. Only where an operator chose ``pip``
does the pod install the pinned version from the index named there into a writable ``/tmp`` on
every run.
The pod takes the cluster's settings for every pod (node selector, tolerations, priority class,
image-pull secrets for a private registry, extra labels and annotations), none of the GPU ones.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from deployments.aiperf import (
    AIPERF_IMAGE,
    AIPERF_SETTINGS,
    AIPERF_VERSION,
    EXPORT_FILE,
    TOKENIZER_DIR,
    filled,
)
from deployments.cluster_settings import AiperfFromIndex, BenchmarkAiperf, ClusterSettings
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render.metadata import with_operator_metadata
from deployments.drivers.kube.render.pods import cpu_pod_scheduling

KEY_ENV = "PLINTH_BENCHMARK_KEY"
KEY_FIELD = "api-key"
TOKENIZER_MOUNT = "/plinth/tokenizer"
RESULT_MARKER = "PLINTH-RESULT"
POD_TMP = "/tmp"  # noqa: S108 - the pod's own emptyDir, not this machine's temporary directory
_KEY_PLACEHOLDER = "\0key\0"  # replaced by "$PLINTH_BENCHMARK_KEY" after quoting


def _labels(slug: str, deployment_id: str, benchmark_id: str) -> dict[str, str]:
    return {
        L.MANAGED_BY: L.PLINTH,
        L.NAME: "aiperf",
        "app.kubernetes.io/instance": slug,
        L.COMPONENT: "benchmark",
        L.BENCHMARK_OF: deployment_id,
        L.BENCHMARK: benchmark_id,
    }


def benchmark_names(slug: str, benchmark_id: str) -> str:
    return L.object_name(slug, f"bench-{benchmark_id[:8]}")


def _meta(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels}


def benchmark_secret(
    *, slug: str, deployment_id: str, benchmark_id: str, namespace: str, api_key: str
) -> dict[str, Any]:
    name = benchmark_names(slug, benchmark_id)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name, namespace, _labels(slug, deployment_id, benchmark_id)),
        "type": "Opaque",
        "stringData": {KEY_FIELD: api_key},
    }


def tokenizer_config_map(
    *, slug: str, deployment_id: str, benchmark_id: str, namespace: str
) -> dict[str, Any]:
    name = benchmark_names(slug, benchmark_id)
    files = {p.name: p.read_text() for p in sorted(TOKENIZER_DIR.glob("*.json"))}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(f"{name}-tok", namespace, _labels(slug, deployment_id, benchmark_id)),
        "data": files,
    }


def aiperf_image(source: BenchmarkAiperf, platform_image: str = "") -> str:
    """The Job's image: the cluster's choice, else the platform's default, else Plinth's."""
    return source.image or platform_image or AIPERF_IMAGE


def _install(source: BenchmarkAiperf) -> list[str]:
    """Shell lines that put ``aiperf`` on PATH: none when the image has it."""
    if not isinstance(source, AiperfFromIndex):
        return []
    return [
        f"python -m pip install --quiet --no-cache-dir --disable-pip-version-check "
        f"--index-url {shlex.quote(source.index_url)} --prefix /tmp/aiperf "
        f"aiperf=={AIPERF_VERSION}",
        "export PATH=/tmp/aiperf/bin:$PATH",
        'export PYTHONPATH="$(echo /tmp/aiperf/lib/python3*/site-packages)"',
    ]


def _script(points: Sequence[Sequence[str]], source: BenchmarkAiperf) -> str:
    lines = ["set -eu", *_install(source)]
    for index, slotted in enumerate(points):
        out = f"{POD_TMP}/out/{index}"
        argv = filled(
            slotted, api_key=_KEY_PLACEHOLDER, tokenizer=TOKENIZER_MOUNT, artifact_dir=out
        )
        quoted = " ".join(shlex.quote(a) for a in ["aiperf", *argv])
        quoted = quoted.replace(shlex.quote(_KEY_PLACEHOLDER), f'"${KEY_ENV}"')
        lines.append(quoted)
        lines.append(
            f'printf "{RESULT_MARKER} {index} %s\\n" "$(tr -d "\\n" < {out}/{EXPORT_FILE})"'
        )
    return "\n".join(lines) + "\n"


def benchmark_job(
    points: Sequence[Sequence[str]],
    *,
    slug: str,
    deployment_id: str,
    benchmark_id: str,
    namespace: str,
    deadline_s: int,
    cluster: ClusterSettings | None = None,
    platform_image: str = "",
) -> dict[str, Any]:
    """The Job that runs the sweep once (no retries: a rerun is a new benchmark): ``points``
    are AIPerf's command lines, one per load point, their slots unfilled (``deployments.aiperf``);
    on ``cluster``'s settings; ``platform_image`` is the installation's default AIPerf image."""
    cluster = cluster or ClusterSettings()
    source = cluster.benchmark_aiperf
    name = benchmark_names(slug, benchmark_id)
    labels = _labels(slug, deployment_id, benchmark_id)
    script = _script(points, source)
    container = {
        "name": "aiperf",
        "image": aiperf_image(source, platform_image),
        "command": ["/bin/sh", "-c"],
        "args": [script],
        "env": [
            {"name": "HOME", "value": POD_TMP},
            *({"name": k, "value": v} for k, v in AIPERF_SETTINGS.items()),
            {
                "name": KEY_ENV,
                "valueFrom": {"secretKeyRef": {"name": name, "key": KEY_FIELD}},
            },
        ],
        "resources": {
            "requests": {"cpu": "2", "memory": "2Gi"},
            "limits": {"memory": "8Gi"},
        },
        "volumeMounts": [
            {"name": "tokenizer", "mountPath": TOKENIZER_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": POD_TMP},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # it calls the gateway, never the cluster
        "containers": [container],
        "volumes": [
            {"name": "tokenizer", "configMap": {"name": f"{name}-tok"}},
            {"name": "tmp", "emptyDir": {}},
        ],
        **cpu_pod_scheduling(cluster),
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }
    return with_operator_metadata(job, cluster)
