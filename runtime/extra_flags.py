"""The SGLang flags a user may add through `runtime.extra_flags`, and how values become argv.

Everything Plinth manages itself (model, parallelism, ports, metrics, disaggregation, speculation,
quantization...) comes from typed spec fields, so a person cannot contradict the plan through a raw
flag. The allowlist holds the tuning knobs that have no typed field and are safe to pass through.
On top of it, the denylist names the flags that run or load code, or read or write host paths,
each with the reason a person is shown: a denied flag is refused even if it is ever allowlisted.

Each extra flag is one canonical flag with one scalar value: `true`/`false` for a switch, else one
number or string of the type the catalogue gives the flag (its choices enforced), never starting
with `-`. `refusal` says why a flag and value are not accepted; validation reports it against
`runtime.extra_flags.<flag>` and `flag_argv`, which `runtime.launch` uses, refuses to emit it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from runtime.argv import UnsafeArgvError, text_problem
from runtime.catalog import FlagCatalog, FlagSpec
from runtime.spec import ExtraFlagValue

_RUNS_CODE = "runs code that a spec or a request supplies"
_READS_PATH = "reads a file or directory on the engine's host"
_WRITES_PATH = "writes to a directory on the engine's host"

EXTRA_FLAG_DENYLIST: dict[str, str] = {
    # running or loading code
    "--enable-custom-logit-processor": "lets every inference request send a serialized logit "
    "processor that the engine unpickles and runs: any key holder runs code in the engine",
    "--trust-remote-code": "runs Python code from the model repository; set "
    "model.trust_remote_code instead, which Plinth shows and audits",
    "--trust-request-chat-template": "lets each request bring a Jinja chat template to render",
    "--custom-weight-loader": "imports and runs the Python functions it names",
    "--forward-hooks": "imports Python callables by name and runs them on every forward pass",
    "--load-format": "'pt' and 'npcache' unpickle weight files, which runs code shipped with "
    "them, and 'sharded_state'/'presharded' read local directories",
    "--model-loader-extra-config": "passes options to the weight loaders, which read local "
    "paths and remote stores",
    "--config": "reads further arguments from a file on the host, past every check",
    # reading host paths
    "--chat-template": f"{_READS_PATH} when the value is a path (e.g. /etc/passwd)",
    "--completion-template": f"{_READS_PATH} when the value is a path",
    "--download-dir": "downloads to and loads weights from any directory of the host",
    "--model-path": "is set from model.source, which is checked to be a repository or cache path",
    "--tokenizer-path": f"{_READS_PATH}; the tokenizer comes with model.source",
    "--speculative-draft-model-path": "is set from speculator.draft_model",
    "--moe-a2a-backend": "is set from parallelism.moe_a2a, which the optimizer prices",
    "--lora-paths": "is set from lora.adapters: list each adapter there (name, source, rank)",
    "--uno-lora-path": _READS_PATH,
    "--quantization-param-path": _READS_PATH,
    "--modelopt-checkpoint-restore-path": _READS_PATH,
    "--kt-weight-path": _READS_PATH,
    "--decrypted-config-file": _READS_PATH,
    "--decrypted-draft-config-file": _READS_PATH,
    "--speculative-ngram-external-corpus-path": _READS_PATH,
    "--speculative-dspark-sps-table-path": _READS_PATH,
    "--speculative-dspark-confidence-sts-path": _READS_PATH,
    "--lmcache-config-file": _READS_PATH,
    "--flexkv-config-file": _READS_PATH,
    "--pdmux-config-path": _READS_PATH,
    "--ssl-keyfile": _READS_PATH,
    "--ssl-certfile": _READS_PATH,
    "--ssl-ca-certs": _READS_PATH,
    "--debug-tensor-dump-input-file": _READS_PATH,
    # writing host paths
    "--modelopt-checkpoint-save-path": _WRITES_PATH,
    "--modelopt-export-path": _WRITES_PATH,
    "--file-storage-path": _WRITES_PATH,
    "--crash-dump-folder": _WRITES_PATH,
    "--debug-tensor-dump-output-folder": _WRITES_PATH,
    "--export-metrics-to-file-dir": _WRITES_PATH,
    "--spec-trace-dir": _WRITES_PATH,
    "--ple-offload-dir": _WRITES_PATH,
}

EXTRA_FLAG_ALLOWLIST: frozenset[str] = (
    frozenset(
        {
            # parsers and templates (a template the model ships, by name)
            "--reasoning-parser",
            "--tool-call-parser",
            "--hf-chat-template-name",
            "--sampling-defaults",
            "--preferred-sampling-params",
            "--json-model-override-args",
            "--tokenizer-mode",
            "--allow-auto-truncate",
            "--stream-response-default-include-usage",
            # kernels and backends
            "--attention-backend",
            "--prefill-attention-backend",
            "--decode-attention-backend",
            "--sampling-backend",
            "--grammar-backend",
            "--moe-runner-backend",
            "--deepep-mode",
            "--fp8-gemm-backend",
            "--fp4-gemm-backend",
            "--enable-torch-compile",
            "--torch-compile-max-bs",
            "--cuda-graph-max-bs-prefill",
            "--disable-cuda-graph-padding",
            "--speculative-attention-mode",
            "--speculative-draft-attention-backend",
            "--speculative-moe-runner-backend",
            # scheduling and caches
            "--max-queued-requests",
            "--num-continuous-decode-steps",
            "--radix-eviction-policy",
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "--hicache-size",
            "--enable-eplb",
            "--ep-num-redundant-experts",
            "--enable-dp-lm-head",
            "--num-reserved-decode-tokens",
            # operations
            "--watchdog-timeout",
            "--dist-timeout",
            "--skip-server-warmup",
            "--log-level",
            "--log-requests",
            "--log-requests-level",
            "--enable-metrics-for-all-schedulers",
        }
    )
    - EXTRA_FLAG_DENYLIST.keys()
)


@dataclass(frozen=True)
class Refusal:
    """Why an extra flag is not accepted, as validation reports it."""

    code: str
    message: str
    fix: str


def refusal(flag: str, value: ExtraFlagValue, catalog: FlagCatalog) -> Refusal | None:
    """Why `flag: value` may not be an extra flag of `catalog`'s SGLang; None when it may."""
    spec = catalog.get(flag)
    canonical = spec.flag if spec is not None else flag
    if canonical in EXTRA_FLAG_DENYLIST:
        return Refusal(
            "flag_refused", f"{flag} is refused: it {EXTRA_FLAG_DENYLIST[canonical]}", "remove it"
        )
    if spec is None:
        return Refusal(
            "flag_unknown",
            f"{flag} is not a flag of SGLang {catalog.version}",
            _did_you_mean(flag, catalog),
        )
    if flag != spec.flag:
        return Refusal(
            "flag_not_canonical",
            f"{flag} is an alias; Plinth writes canonical flag names only",
            f"use {spec.flag}",
        )
    if flag not in EXTRA_FLAG_ALLOWLIST:
        return Refusal(
            "flag_not_allowed",
            f"{flag} is not allowed as an extra flag: Plinth sets it from the spec or it could "
            "break the deployment",
            "use the matching spec field; allowed extra flags: "
            + ", ".join(sorted(EXTRA_FLAG_ALLOWLIST)),
        )
    return _value_refusal(spec, value, catalog)


def _value_refusal(spec: FlagSpec, value: object, catalog: FlagCatalog) -> Refusal | None:
    flag = spec.flag
    if spec.store_true:
        if isinstance(value, bool):
            return None
        return Refusal("flag_invalid_value", f"{flag} is a switch", "use true or false")
    # bool is an int in Python: test it first. Lists (or anything else) are not one value.
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return Refusal("flag_invalid_value", f"{flag} takes one value", _value_fix(spec))
    text = str(value)
    problem = text_problem(text)
    if problem is not None:
        return Refusal("unsafe_value", f"{flag}: the value {problem}", _value_fix(spec))
    for found in catalog.check([flag, text]):
        return Refusal("flag_invalid_value", f"{flag}: {found.message}", _value_fix(spec))
    return None


def _did_you_mean(flag: str, catalog: FlagCatalog) -> str:
    names = [spec.flag for spec in catalog.flags()]
    # argparse would take an unambiguous prefix (`--tp` for `--tp-size`); Plinth never does.
    prefixed = [name for name in names if name.startswith(flag + "-")]
    close = prefixed[:3] or difflib.get_close_matches(flag, names, n=3)
    return f"did you mean {' or '.join(close)}?" if close else "remove it"


def _value_fix(spec: FlagSpec) -> str:
    if spec.choices:
        return "use one of: " + ", ".join(spec.choices)
    return f"give one {spec.type or 'string'} value that does not start with '-'"


def flag_argv(flag: str, value: ExtraFlagValue, catalog: FlagCatalog) -> list[str]:
    """argv for one extra flag: `True` is a bare switch, `False` leaves it out.

    Raises `UnsafeArgvError` for anything `refusal` refuses, so a plan never carries a flag or value
    that validation would not accept, whoever calls it.
    """
    found = refusal(flag, value, catalog)
    if found is not None:
        raise UnsafeArgvError(f"runtime.extra_flags.{flag}", found.message)
    if isinstance(value, bool):
        return [flag] if value else []
    return [flag, str(value)]
