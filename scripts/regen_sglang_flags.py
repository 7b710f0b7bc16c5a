"""Regenerate Plinth's flag catalogues (`runtime/catalog/*.json`) from released wheels.

SGLang's launch flags are whatever its argparse parser accepts, so the only faithful catalogue
is the parser itself. Importing `sglang` pulls in torch at module level (SGLANG.md section 5),
which a control plane must never install, so this script unpacks a downloaded wheel into a
temporary directory, puts a stub `torch` module in front of it, builds
`ServerArgs.add_cli_args(parser)` and writes every option's flags, dest, type, default, choices,
nargs and action. The router (`smg`) parser is read the same way.

Usage (on a machine with the wheels; nothing is downloaded here):

    pip download --no-deps sglang==0.5.23 -d /tmp/wheels
    python scripts/regen_sglang_flags.py sglang /tmp/wheels/sglang-0.5.23-*.whl
    python scripts/regen_sglang_flags.py smg /tmp/wheels/smg-1.13.0-*.whl

A dump made elsewhere in the raw format (`--from-json FILE`) can be converted without a wheel;
that is how the committed catalogues were produced from `shared/reference/`.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any

CATALOG_DIR = Path(__file__).resolve().parent.parent / "runtime" / "catalog"


class _StubMeta(type):
    """Classes whose every attribute is another stub class.

    Import-time code does things like `class Layer(torch.nn.Module)`, `@torch.no_grad()`,
    `torch.cuda.is_available()` or `dtype = torch.bfloat16`; stub *classes* (not instances)
    survive all of them, because they can be subclassed, called and used as decorators.
    """

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_Stub,), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls

    def __bool__(cls) -> bool:
        return False  # "is CUDA available?" -> no


class _Stub(metaclass=_StubMeta):
    pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_Stub,), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers `import torch`, `import torch.distributed`, ... with stub modules."""

    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []  # a package, so submodule imports reach this finder again
        if spec.name == "torch":
            # what sglang 0.5.23 pins; import-time version checks parse it
            setattr(module, "__version__", "2.14.1")  # noqa: B010
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _install_stubs(roots: set[str]) -> None:
    sys.meta_path.insert(0, _StubFinder(roots))


def _unpack(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into)
    sys.path.insert(0, str(into))


def _type_name(action: argparse.Action) -> str | None:
    kind = action.type
    if kind is None:
        return None
    return getattr(kind, "__name__", type(kind).__name__)


def _json_default(value: Any) -> Any:
    try:
        json.dumps(value)
    except TypeError:
        return repr(value)
    return value


def _dump_parser(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        rows.append(
            {
                "opts": list(action.option_strings),
                "dest": action.dest,
                "type": _type_name(action),
                "default": _json_default(action.default),
                "choices": list(action.choices) if action.choices is not None else None,
                "action": type(action).__name__,
                "nargs": action.nargs,
            }
        )
    return rows


def _sglang_parser() -> argparse.ArgumentParser:
    server_args = importlib.import_module("sglang.srt.server_args")
    parser = argparse.ArgumentParser(allow_abbrev=True)
    server_args.ServerArgs.add_cli_args(parser)
    return parser


def _smg_parser() -> argparse.ArgumentParser:
    router_args = importlib.import_module("smg.router_args")
    parser = argparse.ArgumentParser()
    router_args.RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser


_ACTION_KINDS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "DeprecatedStoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "BooleanOptionalAction": "boolean_optional",
    "_AppendAction": "append",
    "_ExtendAction": "extend",
    "LoRAPathAction": "store",
    "DeprecatedStoreConstAction": "store_const",
}

# Parser type callables mapped to the value checks FlagCatalog knows.
_TYPE_KINDS = {
    None: None,
    "str": "str",
    "nullable_str": "str",
    "lower": "str",
    "int": "int",
    "_non_negative_int": "non_negative_int",
    "_parse_int_csv": "int_csv",
    "float": "float",
    "human_readable_int": "human_int",
    "loads": "json",
    "json_list_type": "json_list",
    "parse_cuda_graph_backend_arg": "str",
    "parse_cuda_graph_config_arg": "json",
    "<lambda>": "str",
}


def _normalise_nargs(nargs: Any, kind: str) -> str | None:
    if kind in {"store_true", "store_false", "boolean_optional", "store_const"} or nargs == 0:
        return "0"
    if nargs is None or nargs == 1:
        return None
    return str(nargs)


def _normalise_default(value: Any) -> Any:
    """The raw dumps store some defaults as repr() text ("'auto'", "None"); keep real values."""
    if not isinstance(value, str):
        return value
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value
    try:
        json.dumps(parsed)
    except TypeError:
        return value
    return parsed


def trim(rows: list[dict[str, Any]], source: str, version: str) -> dict[str, Any]:
    """Keep what a launch-plan checker needs: names, value type, choices, arity, deprecation."""
    flags = []
    for row in rows:
        opts = row.get("opts") or row["flags"]
        kind = _ACTION_KINDS.get(row["action"], "store")
        flags.append(
            {
                "flag": opts[0],
                "aliases": list(opts[1:]),
                "dest": row["dest"],
                "kind": kind,
                "type": _TYPE_KINDS.get(row["type"], "str"),
                "choices": row["choices"],
                "nargs": _normalise_nargs(row["nargs"], kind),
                "default": _normalise_default(row["default"]),
                "deprecated": row["action"].startswith("Deprecated"),
            }
        )
    return {"source": source, "version": version, "count": len(flags), "flags": flags}


def _rows_from_json(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    return list(data["args"] if isinstance(data, dict) else data)


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("package", choices=["sglang", "smg"])
    cli.add_argument("wheel", nargs="?", type=Path, help="downloaded wheel (.whl)")
    cli.add_argument("--from-json", type=Path, help="convert a raw parser dump instead of a wheel")
    cli.add_argument("--version", required=False, help="version label (read from the wheel name)")
    cli.add_argument(
        "--out", type=Path, help="output file (default runtime/catalog/<pkg>-<ver>.json)"
    )
    args = cli.parse_args(argv)

    if args.from_json:
        rows = _rows_from_json(args.from_json)
        source = f"converted from {args.from_json.name}"
        version = args.version
    elif args.wheel:
        version = args.version or args.wheel.name.split("-")[1]
        with tempfile.TemporaryDirectory() as tmp:
            _unpack(args.wheel, Path(tmp))
            _install_stubs({"torch", *args.stub})
            parser = _sglang_parser() if args.package == "sglang" else _smg_parser()
            rows = _dump_parser(parser)
        source = f"{args.package}=={version} wheel, argparse parser built with a stub torch"
    else:
        cli.error("give a wheel or --from-json")
    if not version:
        cli.error("--version is required with --from-json")

    out = args.out or CATALOG_DIR / f"{args.package}-{version}.json"
    out.write_text(json.dumps(trim(rows, source, version), indent=1) + "\n")
    print(f"wrote {out} ({len(rows)} flags)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
