"""What an endpoint's engines load from the model hub, and the shell steps that put it into the
cluster's model cache once.

Pure: read from the engines' own flags (so the download fetches exactly what they load), with
the marker each finished download leaves in the cache. ``render`` places the steps: a Job per
claim, an init container per node for a hostPath cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from deployments.drivers.base import RevisionPlan
from runtime.spec import MODEL_CACHE_PATH

# Where finished downloads leave their markers, in the model cache.
WEIGHTS_MARKERS = f"{MODEL_CACHE_PATH}/plinth-ready"
# The flags naming what an engine loads from the hub: (repository, its revision).
_MODEL_FLAGS = (
    ("--model-path", "--revision"),
    ("--speculative-draft-model-path", "--speculative-draft-model-revision"),
)
# Downloads one repository into $HF_HOME unless its marker says it is there, then leaves the
# marker. Its values come from the environment, never from the script's text, so no repository
# id or revision is read by the shell. `hf` is huggingface_hub's CLI; images before 0.34 have
# `huggingface-cli` only. Concurrent downloads into one cache are safe: huggingface_hub locks
# each file.
DOWNLOAD_SCRIPT = """set -eu
if [ -f "$PLINTH_WEIGHTS_MARKER" ]; then
  echo "$PLINTH_WEIGHTS_REPO is in the model cache already"
  exit 0
fi
set -- "$PLINTH_WEIGHTS_REPO"
if [ -n "${PLINTH_WEIGHTS_REVISION:-}" ]; then set -- "$@" --revision "$PLINTH_WEIGHTS_REVISION"; fi
if command -v hf >/dev/null 2>&1; then hf download "$@"; else huggingface-cli download "$@"; fi
mkdir -p "$(dirname "$PLINTH_WEIGHTS_MARKER")"
touch "$PLINTH_WEIGHTS_MARKER"
"""
# Waits until a download Job has left every marker in the shared cache.
WAIT_SCRIPT = """set -eu
for marker in $PLINTH_WEIGHTS_MARKERS; do
  [ -f "$marker" ] || echo "waiting for the weights download to leave $marker"
  until [ -f "$marker" ]; do sleep 5; done
done
"""


@dataclass(frozen=True)
class Weights:
    """One Hugging Face repository the engines load, at a revision (None: the default one)."""

    repo: str
    revision: str | None = None

    @property
    def marker(self) -> str:
        """The file a finished download leaves in the cache. A repo id never holds '--' or '@'
        (the spec refuses them), so '/' as '--' keeps two repositories apart and '@' starts
        the revision."""
        at = f"@{self.revision}" if self.revision else ""
        return f"{WEIGHTS_MARKERS}/{self.repo.replace('/', '--')}{at}"


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (the last one, as argparse reads it)."""
    value = None
    for at, arg in enumerate(args):
        if arg == flag and at + 1 < len(args):
            value = args[at + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def weights_of(revision: RevisionPlan) -> list[Weights]:
    """What the engines load from the hub (the model, a draft model), read from their own flags
    so the download fetches exactly what they load; a path under the cache needs none."""
    found: dict[Weights, None] = {}
    for role in revision.plan.roles:
        if role.role == "router":
            continue
        for path_flag, revision_flag in _MODEL_FLAGS:
            repo = _flag_value(role.args, path_flag)
            if repo and not repo.startswith("/"):
                found[Weights(repo, _flag_value(role.args, revision_flag))] = None
    return list(found)
