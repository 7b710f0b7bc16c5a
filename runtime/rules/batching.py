"""Batching and scheduling settings that SGLang asserts on or silently overrides."""

from __future__ import annotations

from collections.abc import Iterator

from runtime.issues import Issue, error, warning
from runtime.memory import default_max_running
from runtime.rules.context import RuleContext


def mem_fraction(ctx: RuleContext) -> Iterator[Issue]:
    fraction = ctx.spec.batching.mem_fraction_static
    if fraction is not None and fraction > 0.95:
        yield warning(
            "batching.mem_fraction_static",
            "mem_fraction_too_high",
            f"a static memory fraction of {fraction} leaves under 5% of the GPU for activations "
            "and CUDA graphs; the engine is likely to run out of memory under load",
            "leave it unset (SGLang picks it from GPU memory) or use at most 0.9",
        )


def chunk_pages(ctx: RuleContext) -> Iterator[Issue]:
    chunk, page = ctx.spec.batching.chunked_prefill_size, ctx.spec.batching.page_size
    if chunk is not None and page is not None and chunk > 0 and chunk % page != 0:
        yield error(
            "batching.chunked_prefill_size",
            "chunked_prefill_page_size",
            f"chunked prefill size {chunk} is not a multiple of page size {page} "
            "(SGLang asserts this)",
            f"use {max(page, chunk // page * page)}",
        )


def cuda_graph_batch(ctx: RuleContext) -> Iterator[Issue]:
    graph_bs = ctx.spec.batching.cuda_graph_max_bs_decode
    running = default_max_running(ctx.spec)
    if graph_bs is not None and running is not None and graph_bs > running:
        yield warning(
            "batching.cuda_graph_max_bs_decode",
            "cuda_graph_bs_above_running",
            f"CUDA graphs for batches up to {graph_bs}, but at most {running} requests run at "
            "once; the larger graphs only cost memory",
            f"use at most {running}",
        )


RULES = (mem_fraction, chunk_pages, cuda_graph_batch)
