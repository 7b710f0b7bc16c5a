"""NVIDIA AIPerf, the benchmark tool, as every layer knows it: its pinned version and images,
the settings and environment it runs with, the tokenizer Plinth ships it, where it writes its
export, and the slots of a command line that whoever runs it fills in (pure; below the drivers).

A benchmark's command lines are built once per load point
(``deployments.experiments.benchmark.aiperf.aiperf_argv``) with three slots that only the runner
knows how to fill: the API key (the local runner passes it through the environment, a Job from its
Secret), the tokenizer's folder (this machine's, or the Job's mounted ConfigMap) and the folder
AIPerf writes its artifacts to. ``filled`` fills them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from runtime import catalog

AIPERF_VERSION = "0.13.0"
# The Kubernetes Job's image by default: Plinth's, AIPERF_VERSION on PATH (built from
# docker/aiperf/Dockerfile, whose pins a test holds to these), so a Job installs nothing and
# needs no package index. An operator mirrors it or names another (``ClusterSettings``).
AIPERF_IMAGE = f"ghcr.io/plinth-project/aiperf:{AIPERF_VERSION}"
# The plain Python that image is built on, and that a cluster which chose to install AIPerf from
# a package index on each run (``benchmark_aiperf: {type: pip}``) runs the Job in.
PYTHON_IMAGE = "python:3.11.11-slim-bookworm"

# Found through the catalogue package itself, so the path holds wherever this module lives.
TOKENIZER_DIR = Path(catalog.__file__).resolve().parent / "tokenizers" / "plinth-sim"
EXPORT_FILE = "profile_export_aiperf.json"

# AIPerf's settings for every run, local or in a Job. Its count of answers whose length differs
# from the one asked (``osl_mismatch_count``) tolerates 5% by default; 0 counts every one.
AIPERF_SETTINGS = {
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "AIPERF_METRICS_OSL_MISMATCH_PCT_THRESHOLD": "0",
}
# What AIPerf inherits of the worker's environment (``aiperf_env``). HF_HUB_OFFLINE is not among
# them: AIPerf 0.13 refuses a tokenizer *path* when it is set (it then looks the path up as a
# cached hub repository), and a local path never reaches the hub either way.
_INHERITED = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TZ", "TMPDIR", "TEMP", "TMP", "LANG", "LANGUAGE"}
    | {"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HF_HOME"}
)
_INHERITED_PREFIXES = ("LC_", "XDG_")
_PROXIES = frozenset({"http_proxy", "https_proxy", "no_proxy", "all_proxy"})

# The slots of a command line (whole arguments, never part of one).
KEY_SLOT = "<plinth:api-key>"
TOKENIZER_SLOT = "<plinth:tokenizer>"
ARTIFACT_DIR_SLOT = "<plinth:artifact-dir>"


def aiperf_env(base: Mapping[str, str]) -> dict[str, str]:
    """AIPerf's environment from the worker's ``base``: only what a process needs to run (paths,
    locale, temporary and cache folders, proxies and CA bundles). The worker's own environment
    holds its secrets (``SECRET_KEY``, database and broker URLs, cloud credentials); a tool run on
    users' behalf gets none of them."""
    env = {
        k: v
        for k, v in base.items()
        if k in _INHERITED or k.startswith(_INHERITED_PREFIXES) or k.lower() in _PROXIES
    }
    return {**env, **AIPERF_SETTINGS}


def filled(argv: Sequence[str], *, api_key: str, tokenizer: str, artifact_dir: str) -> list[str]:
    """``argv`` with its slots filled by the runner's values."""
    values = {KEY_SLOT: api_key, TOKENIZER_SLOT: tokenizer, ARTIFACT_DIR_SLOT: artifact_dir}
    return [values.get(arg, arg) for arg in argv]
