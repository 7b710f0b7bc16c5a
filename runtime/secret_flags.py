"""Secret flag values (the endpoint's API key) reaching a process without its command line.

SGLang 0.5.23 and smg 1.13.0 take the API key only as ``--api-key VALUE`` (neither reads it from
the environment: reference/SGLANG.md 1.8, ``smg launch --help``), and a process' command line is
readable by every local user (``/proc/<pid>/cmdline``, ``ps``). So the key travels in the
environment, as ``PLINTH_API_KEY``, and the argv names it: ``--api-key $(PLINTH_API_KEY)``. This
module replaces that reference with the value inside the process, after ``exec``::

    python -m runtime.secret_flags -m runtime.sim ... --api-key '$(PLINTH_API_KEY)'
    python -m runtime.secret_flags /path/to/smg launch ... --api-key '$(PLINTH_API_KEY)'

On Kubernetes the images carry Python but not Plinth, so a container runs this module's own
source (``container_command``: ``python3 -c <source> -m sglang.launch_server ...``, or ``smg``
found on ``PATH``), with the reference escaped from the kubelet, which would otherwise expand
it into the container's command line (``deployments.drivers.kube.render``).

It takes the value out of its environment (so the engine's own children do not inherit it),
puts it in place of the reference in ``sys.argv`` and runs the program in this interpreter, as
``python -m MODULE`` or ``python SCRIPT`` would: ``/proc/<pid>/cmdline`` keeps the reference.
The program (the simulator, SGLang, smg's Python entry point) reads ``--api-key`` as it always
does. Only the value of a key flag that is exactly the reference is replaced, so no other
argument (a served model name, say) can make a program print the key.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
from collections.abc import MutableMapping, Sequence

# The variable that carries the endpoint's API key (and the Kubernetes Secret's key).
API_KEY_ENV = "PLINTH_API_KEY"
# What stands for the key on a command line; Kubernetes' syntax for a variable in ``args``.
API_KEY_REF = f"$({API_KEY_ENV})"
KEY_FLAGS = frozenset({"--api-key"})
USAGE = "usage: python -m runtime.secret_flags (-m MODULE | SCRIPT) [ARG ...]"


class SecretFlagError(Exception):
    """The program cannot be started with its key kept off the command line."""


def expand(argv: Sequence[str], environ: MutableMapping[str, str]) -> list[str]:
    """``argv`` with each key flag's reference replaced by the value, taken out of ``environ``."""
    wanted = [i for i, token in enumerate(argv) if _is_reference(argv, i, token)]
    if not wanted:
        return list(argv)
    value = environ.pop(API_KEY_ENV, "")
    if not value:
        raise SecretFlagError(f"{API_KEY_REF} is on the command line but {API_KEY_ENV} is unset")
    return [value if i in wanted else token for i, token in enumerate(argv)]


def _is_reference(argv: Sequence[str], index: int, token: str) -> bool:
    return token == API_KEY_REF and index > 0 and argv[index - 1] in KEY_FLAGS


def _is_python_script(path: str) -> bool:
    """Whether ``path`` is a Python program (smg's console script is); a native binary could
    only be handed the key on its command line."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return False
    return path.endswith(".py") or (first.startswith(b"#!") and b"python" in first)


def run(argv: Sequence[str]) -> None:
    """Run ``-m MODULE args`` or ``SCRIPT args`` here, with its key flags expanded."""
    if len(argv) >= 2 and argv[0] == "-m":
        module, args = argv[1], expand(argv[2:], os.environ)
        sys.argv = [module, *args]  # runpy puts the module's file in sys.argv[0], as -m does
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    if len(argv) >= 1 and not argv[0].startswith("-"):
        script, args = _program(argv[0]), expand(argv[1:], os.environ)
        if not _is_python_script(script):
            raise SecretFlagError(f"{script} is not a Python program: its key would be on argv")
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")
        return
    raise SecretFlagError(USAGE)


def _program(name: str) -> str:
    """A program's path: ``name`` itself, or where ``PATH`` finds a bare name (``smg``)."""
    if os.sep in name:
        return name
    return shutil.which(name) or name


def container_command(command: Sequence[str]) -> list[str]:
    """``command`` (``python3 -m MODULE`` or a program on ``PATH``) started through this module,
    for an image that carries ``python3`` but not Plinth: its source travels as ``-c``."""
    program = list(command)
    if program[:2] == ["python3", "-m"]:
        program = program[1:]
    with open(__file__, encoding="utf-8") as source:
        return ["python3", "-c", source.read(), *program]


def main() -> None:
    try:
        run(sys.argv[1:])
    except SecretFlagError as exc:
        print(f"runtime.secret_flags: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
