"""A program started through ``runtime.secret_flags`` reads its ``--api-key`` as usual, while
its command line (what ``ps`` shows every local user) keeps only the reference to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from deployments.drivers.kube.render import KubeOptions, render_revision
from runtime.secret_flags import API_KEY_ENV, API_KEY_REF, SecretFlagError, expand
from runtime.spec import RuntimeSpec
from tests.drivers.kubelet import kube_expand
from tests.drivers.reference_specs import REF, revision_plan

REPO_ROOT = Path(__file__).resolve().parents[2]
KEY = "pek_" + "5e" * 32
# Reports what it was given: its argv, its command line and whether the key is in its env.
PROGRAM = """
import json, os, sys
cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
print(json.dumps({"argv": sys.argv[1:], "cmdline": cmdline, "env": "PLINTH_API_KEY" in os.environ}))
"""


def launch(tmp_path: Path, *args: str, key: str | None = KEY) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT)}
    if key is not None:
        env[API_KEY_ENV] = key
    argv = [sys.executable, "-m", "runtime.secret_flags", str(script), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)


def test_the_program_reads_the_key_its_command_line_does_not_show(tmp_path: Path) -> None:
    done = launch(tmp_path, "--port", "1", "--api-key", API_KEY_REF)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["argv"] == ["--port", "1", "--api-key", KEY]
    assert KEY not in seen["cmdline"] and f"--api-key {API_KEY_REF}" in seen["cmdline"]
    assert seen["env"] is False  # taken out: the program's own children do not inherit it


def test_only_a_key_flags_reference_is_replaced() -> None:
    environ = {API_KEY_ENV: KEY}
    argv = ["--served-model-name", API_KEY_REF, "--api-key", API_KEY_REF]
    assert expand(argv, environ) == ["--served-model-name", API_KEY_REF, "--api-key", KEY]
    assert expand(["--port", "1"], {}) == ["--port", "1"]  # nothing to expand: no key needed


def test_a_reference_without_a_key_or_a_program_that_is_not_python_is_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(SecretFlagError, match=API_KEY_ENV):
        expand(["--api-key", API_KEY_REF], {})
    missing = launch(tmp_path, "--api-key", API_KEY_REF, key=None)
    assert missing.returncode == 2 and "is unset" in missing.stderr
    native = subprocess.run(
        [sys.executable, "-m", "runtime.secret_flags", "/bin/true", "--api-key", API_KEY_REF],
        env={"PYTHONPATH": str(REPO_ROOT), API_KEY_ENV: KEY},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert native.returncode == 2 and "not a Python program" in native.stderr


def test_keyed_kube_containers_read_their_key_and_no_command_line_shows_it(
    tmp_path: Path,
) -> None:
    """The engine and router containers as rendered, started as the kubelet would (``$(VAR)``
    references expanded from their env, the Secret's value in ``PLINTH_API_KEY``), with this
    machine's Python in the image's place and programs that report what they were given (the
    engine's module, the router's ``smg`` on ``PATH``): each gets the key, and no command line
    the node can read holds it."""
    (tmp_path / "fake_engine.py").write_text(PROGRAM)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "smg").write_text(f"#!{sys.executable}\n{PROGRAM}")
    (bin_dir / "smg").chmod(0o755)
    spec = RuntimeSpec.model_validate(
        {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
    )
    objects = render_revision(replace(REF, api_key=KEY), revision_plan(spec), KubeOptions())
    containers = {
        c["name"]: c
        for obj in objects
        if obj["kind"] == "Deployment"
        for c in obj["spec"]["template"]["spec"]["containers"]
    }
    programs = {"engine": ["-m", "sglang.launch_server"], "router": ["smg", "launch"]}
    assert containers.keys() == programs.keys()
    env = {API_KEY_ENV: KEY}
    for name, container in containers.items():
        command = [kube_expand(part, env) for part in container["command"]]
        args = [kube_expand(arg, env) for arg in container["args"]]
        assert KEY not in command + args
        assert command[:2] == ["python3", "-c"] and command[3:] == programs[name]
        program = ["-m", "fake_engine"] if name == "engine" else ["smg", "launch"]
        done = subprocess.run(
            [sys.executable, *command[1:3], *program, *args],
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(tmp_path), **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen["argv"][seen["argv"].index("--api-key") + 1] == KEY
        assert KEY not in seen["cmdline"] and f"--api-key {API_KEY_REF}" in seen["cmdline"]
        assert seen["env"] is False
