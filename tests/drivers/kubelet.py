"""What the kubelet does to a container's spec when it starts it, which tests of rendered pods
rely on: the emulator, like a dry run, starts no container, and kwok's fake kubelet runs none."""

from __future__ import annotations

import re
from collections.abc import Mapping

_REFERENCE = re.compile(r"\$(\$|\(([A-Za-z_][A-Za-z0-9_]*)\))")


def kube_expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion of a container's command and args (`$$` is a literal
    `$`; an undefined variable is left as written)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        return env.get(match.group(2), match.group(0))

    return _REFERENCE.sub(replace, text)
