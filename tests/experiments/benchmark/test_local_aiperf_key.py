"""AIPerf on the local cluster gets the benchmark's key, and no local user can read it off the
process table: the command line names ``$(PLINTH_API_KEY)``, the value is in its environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from deployments.drivers.local import tools_env
from deployments.drivers.local.benchmark import run_aiperf

KEY = "pli_" + "6d" * 32
# Stands in for AIPerf's console script (a Python program, as pip writes it): it reports the
# arguments it parsed and what /proc shows of it, as an export file where AIPerf writes one.
FAKE_AIPERF = """#!/usr/bin/env python3
import json, sys
cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
with open("profile_export_aiperf.json", "w") as out:
    json.dump({"argv": sys.argv[1:], "cmdline": cmdline}, out)
"""


def fake_tools(tools_dir: Path) -> None:
    env = tools_env.aiperf_env_dir(tools_dir)
    (env / "bin").mkdir(parents=True)
    os.symlink(sys.executable, env / "bin" / "python")
    (env / "bin" / "aiperf").write_text(FAKE_AIPERF)
    (env / "bin" / "aiperf").chmod(0o755)
    (env / tools_env.STAMP).write_text(tools_env.AIPERF_VERSION + "\n")


def test_aiperf_reads_the_key_that_its_command_line_does_not_show(tmp_path: Path) -> None:
    fake_tools(tmp_path / "tools")
    argv = ["profile", "--url", "http://127.0.0.1:1", "--api-key", KEY, "--streaming"]
    export = run_aiperf(argv, tmp_path / "out", tools_dir=tmp_path / "tools", timeout_s=60)
    seen = json.loads(export.read_text())
    assert seen["argv"] == argv
    assert KEY not in seen["cmdline"] and "--api-key $(PLINTH_API_KEY)" in seen["cmdline"]
