"""The installed ``plinth`` command end to end against a running Plinth: login, apply a
directory of three endpoints, diff after an edit, apply again, prune one, logs, rollback."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.sdk import SdkEnv, client_env

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process

SPEC = """\
  model: {source: meta-llama/Llama-3.1-8B-Instruct}
  hardware: {gpu: H100-SXM}
  autoscaling: {min_replicas: 1, max_replicas: %d}
"""


def document(name: str, max_replicas: int = 2) -> str:
    head = f"apiVersion: plinth.dev/v1\nkind: Endpoint\nmetadata:\n  name: {name}\n"
    return head + "  labels: {team: search}\nspec:\n" + SPEC % max_replicas


class Cli:
    def __init__(self, env: SdkEnv, home: Path) -> None:
        self.exe, self.env = str(env.plinth), client_env(home)

    def __call__(self, *args: str, stdin: str = "", code: int = 0) -> str:
        result = subprocess.run(
            [self.exe, *args],
            input=stdin,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == code, f"{args}: {result.stdout}{result.stderr}"
        return result.stdout + result.stderr


def test_login_apply_diff_prune_logs_and_rollback_with_the_installed_command(
    sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path
) -> None:
    plinth = Cli(sdk_env, tmp_path / "home")
    repo = tmp_path / "endpoints"
    repo.mkdir()

    # Not signed in: a clear message and the exit code for it; a wrong key is refused at login.
    assert "plinth login" in plinth("get", code=6)
    plinth("login", server, stdin="pk_wrong\n", code=6)
    plinth("login", server, stdin=admin_key + "\n")
    config = tmp_path / "home" / ".config" / "plinth" / "config.yaml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert admin_key in config.read_text()

    # Apply a directory of three endpoints (two files, one holding two documents).
    (repo / "chat.yaml").write_text(document("cli-chat"))
    (repo / "more.yaml").write_text(document("cli-embed") + "---\n" + document("cli-code"))
    assert "+ cli-chat: create" in plinth("apply", "-f", str(repo), "--dry-run")
    assert json.loads(plinth("get", "-o", "json")) == []  # the dry run changed nothing
    out = plinth("apply", "-f", str(repo), "--owner", "infra")
    assert out.count("created (revision 1)") == 3, out
    listed = json.loads(plinth("get", "-o", "json"))
    assert sorted(e["slug"] for e in listed) == ["cli-chat", "cli-code", "cli-embed"]
    assert all(e["labels"] == {"team": "search", "plinth.dev/managed-by": "infra"} for e in listed)
    plinth("diff", "-f", str(repo), "--owner", "infra")  # exit 0: nothing differs

    # Edit one document: diff shows that field (exit 1), apply saves one new revision only.
    (repo / "chat.yaml").write_text(document("cli-chat", max_replicas=5))
    out = plinth("diff", "-f", str(repo), "--owner", "infra", code=1)
    assert "~ cli-chat: update" in out and "autoscaling.max_replicas: 2 -> 5" in out, out
    assert "= cli-code: unchanged" in out
    out = plinth("apply", "-f", str(repo), "--owner", "infra")
    assert "cli-chat: updated (revision 2)" in out and out.count("unchanged") == 2, out
    assert "cli-chat: unchanged" in plinth("apply", "-f", str(repo), "--owner", "infra")

    # Prune: only endpoints carrying this apply's owner label and gone from the directory.
    (repo / "more.yaml").write_text(document("cli-embed"))
    out = plinth("diff", "-f", str(repo), "--owner", "infra", "--prune", code=1)
    assert "- cli-code: delete" in out
    assert "cli-code" not in plinth("apply", "-f", str(repo), "--owner", "other", "--prune")
    out = plinth("apply", "-f", str(repo), "--owner", "infra", "--prune")
    assert "cli-code: deleted" in out, out
    assert json.loads(plinth("get", "cli-code", "-o", "json"))["status"] == "deleting"

    # Logs: a local replica's log file as the server reads it; -f prints what is appended.
    chat_id = json.loads(plinth("get", "cli-chat", "-o", "json"))["id"]
    log = tmp_path / "data" / "local" / chat_id / "r1-engine-0.log"
    log.parent.mkdir(parents=True)
    log.write_text("--- starting\nserver ready\n")
    assert plinth("logs", "cli-chat").splitlines() == ["--- starting", "server ready"]
    follower = subprocess.Popen(
        [plinth.exe, "logs", "cli-chat", "-f"], env=plinth.env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "--- starting\n"
        with log.open("a") as handle:
            handle.write("first request\n")
        assert [follower.stdout.readline() for _ in range(2)] == [
            "server ready\n",
            "first request\n",
        ]
    finally:
        follower.kill()
        follower.wait()

    # Rollback.
    out = plinth("rollback", "cli-chat", "--to", "1", "-o", "yaml")
    assert "target_revision: 3" in out, out
    described = plinth("describe", "cli-chat", "-o", "json")
    assert json.loads(described)["spec"]["autoscaling"]["max_replicas"] == 2

    # Edit in $EDITOR (a script standing in for the user): a new revision from the one shown.
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/max_replicas: 2/max_replicas: 3/' \"$1\"\n")
    editor.chmod(0o755)
    plinth.env["EDITOR"] = str(editor)
    assert "target_revision: 4" in plinth("edit", "cli-chat", "-o", "yaml")
    assert "DEPLOYMENT_SLUG" in plinth("usage")
    assert "GPU_HOURS" in plinth("costs", "--by", "key")
    assert "month" in plinth("costs", "--month", "2026-13", code=5)

    # Errors: the API's field and fix on stderr with their exit codes.
    assert "not found" in plinth("get", "no-such-endpoint", code=3)
    out = plinth("scale", "cli-chat", "9", code=5)
    assert "replicas" in out, out
    (repo / "bad.yaml").write_text(document("cli-bad").replace("H100-SXM", "NO-SUCH-GPU"))
    assert "spec.hardware.gpu" in plinth("apply", "-f", str(repo), code=5)
    plinth("secrets", "set", "hf-token", stdin="hf_secret_value\n")
    assert "hf-token" in plinth("secrets", "list")


def test_apply_names_a_refused_setting_by_the_apis_path(
    sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path
) -> None:
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(document("cli-bad") + "  parallelism: {tp: 3}\n")
    for command in ("apply", "diff"):
        out = plinth(command, "-f", str(bad), code=5)
        assert "\n  spec.parallelism.tp: " in out and "spec.spec." not in out, out


HELP_CHECK = """
import typer.main
from plinth.cli import app

def walk(command, path):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from walk(sub, path + [name])
    else:
        yield " ".join(path), command.help or ""

commands = walk(typer.main.get_command(app), [])
missing = [name for name, text in commands if "Example: plinth" not in text]
print(missing)
"""


def test_every_command_has_help_with_an_example_and_completion(sdk_env: SdkEnv) -> None:
    result = subprocess.run(
        [str(sdk_env.python), "-c", HELP_CHECK], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout
    # As a user runs it, from their shell: Typer detects the shell from the parent process (it
    # takes no shell name), so bash runs it as a child (the "; exit" keeps bash from exec'ing it,
    # which would make pytest the parent and leave no shell to detect).
    completion = subprocess.run(
        ["/bin/bash", "-c", '"$0" --show-completion; exit $?', str(sdk_env.plinth)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    assert "_PLINTH_COMPLETE" in completion.stdout, completion.stdout + completion.stderr
