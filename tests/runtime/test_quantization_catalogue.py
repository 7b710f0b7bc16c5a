"""Quantization facts have one home: ``runtime/catalog/quantization.yaml``.

Six tables once said what a format weighs, where it runs and what it is called, and two of them
disagreed (the simulator priced FP8 weights at 1.0 byte, the memory fit at 1.02). These tests keep
it to one: a second table keyed by the catalogue's names, or a hard-coded SM threshold, fails.
"""

from __future__ import annotations

import ast
import re

from runtime.catalog import (
    get_gpu,
    kv_cache_dtypes,
    kv_cache_labels,
    kv_format,
    native_on,
    quantization_labels,
    quantization_methods,
    weight_format,
)
from runtime.catalog.quantization import catalogued_names
from runtime.memory import kv_bytes_per_value
from runtime.perf.hardware import gpu_shape
from runtime.perf.quant import bytes_per_param, gemm_dtype, kv_dtype_bytes
from runtime.spec import KV_CACHE_DTYPES, QUANTIZATION_METHODS
from tests.controlplane.source_tree import sources

HOME = "runtime/catalog/quantization.py"
SCANNED = ("runtime", "deployments", "controlplane", "gateway", "sdk/plinth")
# Where a GPU's SM number may be compared with a literal: the catalogue and the GPU shapes.
SM_COMPARISONS_OK = ("runtime/catalog/", "runtime/perf/hardware.py")
SM_LITERAL = re.compile(r"\.sm\s*[<>]=?\s*\d{2,3}")


def _literals(node: ast.expr) -> list[ast.expr]:
    """The collection literals an assigned value is made of (``A | {...}`` gives both sides)."""
    if isinstance(node, ast.BinOp):
        return _literals(node.left) + _literals(node.right)
    if (
        isinstance(node, ast.Call)
        and node.args
        and getattr(node.func, "id", "")
        in (
            "frozenset",
            "set",
            "tuple",
        )
    ):
        return _literals(node.args[0])
    return [node] if isinstance(node, ast.Dict | ast.Set | ast.Tuple | ast.List) else []


def _strings(literal: ast.expr) -> set[str]:
    members = literal.keys if isinstance(literal, ast.Dict) else getattr(literal, "elts", [])
    return {m.value for m in members if isinstance(m, ast.Constant) and isinstance(m.value, str)}


def _tables() -> list[tuple[str, str, int]]:
    """(module, assigned name, line) of every top-level table of catalogued format names."""
    names = catalogued_names()
    found = []
    for source in sources(*SCANNED):
        if source.name == HOME:
            continue
        for node in source.tree.body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for literal in _literals(value):
                members = _strings(literal)
                common = members & names
                if len(common) >= 3 or (len(common) >= 2 and members <= names):
                    target = ", ".join(ast.unparse(t) for t in targets)
                    found.append((source.name, target, node.lineno))
    return found


def test_no_second_table_of_quantization_facts() -> None:
    assert _tables() == []


def test_no_hard_coded_sm_threshold_outside_the_catalogue() -> None:
    found = [
        f"{source.name}:{number}"
        for source in sources(*SCANNED)
        if not source.name.startswith(SM_COMPARISONS_OK)
        for number, line in enumerate(source.path.read_text().splitlines(), 1)
        if SM_LITERAL.search(line)
    ]
    assert found == []


def test_the_spec_accepts_exactly_the_offered_rows() -> None:
    assert quantization_methods() == QUANTIZATION_METHODS
    assert kv_cache_dtypes() == KV_CACHE_DTYPES
    assert list(quantization_labels()) == list(QUANTIZATION_METHODS)
    assert list(kv_cache_labels()) == list(KV_CACHE_DTYPES)


def test_the_memory_fit_and_the_simulator_price_the_same_bytes() -> None:
    for method in quantization_methods():
        form = weight_format(method)
        assert form is not None
        assert bytes_per_param(method, "auto") == form.bytes
    for dtype in kv_cache_dtypes():
        form = kv_format(dtype)
        assert form is not None
        assert kv_bytes_per_value(dtype) == form.bytes == kv_dtype_bytes(dtype, "auto")
    assert bytes_per_param("fp8", "auto") == 1.02  # the memory fit's figure, not the old 1.0


def test_fp8_computes_natively_from_ada_and_fp4_from_blackwell() -> None:
    ampere, ada, blackwell = get_gpu("A100-80GB"), get_gpu("L40S"), get_gpu("B200")
    assert not native_on(ampere, "fp8") and native_on(ada, "fp8")
    assert not native_on(ada, "modelopt_fp4") and native_on(blackwell, "modelopt_fp4")
    assert gemm_dtype(gpu_shape(ada), "fp8") == "fp8"
    assert gemm_dtype(gpu_shape(ampere), "fp8") == "bf16"
    assert gemm_dtype(gpu_shape(blackwell), "nvfp4_online") == "fp4"
    assert gemm_dtype(gpu_shape(blackwell), "awq") == "bf16"  # weight-only: dequantized to BF16
