"""HiCache as typed settings (`kv_cache.tiers`, issue 29 item 1): the choices are SGLang 0.5.23's,
the flags rendered are in its catalogue with valid values, the memory fit counts the host tier per
node, and what SGLang would refuse or silently rewrite is refused here, naming the field."""

from __future__ import annotations

import math
import typing
from typing import Any

import pytest

from runtime.catalog import get_gpu, sglang_flags
from runtime.kv_tiers import (
    HiCacheIoBackend,
    HiCacheMemLayout,
    HiCachePrefetchPolicy,
    HiCacheStorageBackend,
    HiCacheWritePolicy,
)
from runtime.launch import plan
from runtime.memory import GIB, host_memory_per_node, memory_fit
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups
from runtime.validate import check
from tests.runtime.conftest import SpecData

FILE_STORAGE = {"backend": "file", "node_path": "/mnt/nvme/hicache"}


def tiers(host: dict[str, Any] | None = None, storage: dict[str, Any] | None = None) -> dict:
    return {"kv_cache": {"tiers": {"host": host, "storage": storage}}}


def errors(spec_data: SpecData, **groups: Any) -> set[tuple[str, str]]:
    _, issues = check(spec_data(**groups))
    return {(i.code, i.field) for i in issues if i.is_error}


@pytest.mark.parametrize(
    ("alias", "flag"),
    [
        (HiCacheWritePolicy, "--hicache-write-policy"),
        (HiCacheMemLayout, "--hicache-mem-layout"),
        (HiCachePrefetchPolicy, "--hicache-storage-prefetch-policy"),
        (HiCacheStorageBackend, "--hicache-storage-backend"),
        (HiCacheIoBackend, "--hicache-io-backend"),
    ],
)
def test_every_choice_offered_is_one_sglang_accepts(alias: Any, flag: str) -> None:
    catalogue = sglang_flags().get(flag)
    assert catalogue is not None and catalogue.choices
    assert set(typing.get_args(alias)) <= set(catalogue.choices)


def test_a_host_and_file_tier_render_sglangs_flags_and_pass_the_catalogue(
    spec_data: SpecData,
) -> None:
    spec, issues = check(
        spec_data(**tiers({"ratio": 3, "write_policy": "write_back"}, FILE_STORAGE))
    )
    assert spec is not None and not [i for i in issues if i.is_error], issues
    engine = plan(spec).roles[0]
    args = engine.args
    pairs = dict(zip(args, [*args[1:], ""], strict=True))
    assert "--enable-hierarchical-cache" in args
    assert pairs["--hicache-ratio"] == "3.0"
    assert pairs["--hicache-write-policy"] == "write_back"
    # SGLang's defaults are spelled out: a new release cannot move them under an endpoint.
    assert pairs["--hicache-io-backend"] == "kernel"
    assert pairs["--hicache-mem-layout"] == "page_first"
    assert pairs["--hicache-storage-backend"] == "file"
    assert pairs["--hicache-storage-prefetch-policy"] == "timeout"
    assert engine.env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == "/var/lib/plinth/hicache"
    assert engine.kv_storage is not None and engine.kv_storage.node_path == "/mnt/nvme/hicache"
    assert list(sglang_flags().check(args)) == []


def test_mooncake_gets_its_master_and_metadata_server_as_extra_config(
    spec_data: SpecData,
) -> None:
    storage = {
        "backend": "mooncake",
        "master_address": "mooncake-master:50051",
        "metadata_server": "http://mooncake-meta:8080/metadata",
        "protocol": "tcp",
    }
    spec, issues = check(spec_data(**tiers({}, storage)))
    assert spec is not None and not [i for i in issues if i.is_error], issues
    args = plan(spec).roles[0].args
    config = args[args.index("--hicache-storage-backend-extra-config") + 1]
    assert '"master_server_address":"mooncake-master:50051"' in config
    assert '"protocol":"tcp"' in config
    assert plan(spec).roles[0].kv_storage is None


def test_the_host_tier_is_counted_per_node_and_requested(spec_data: SpecData) -> None:
    spec = RuntimeSpec.model_validate(spec_data(**tiers({"ratio": 2})))
    arch = spec.model.arch()
    assert arch is not None

    group = engine_groups(spec)[0]
    fit = memory_fit(spec, get_gpu("H100-SXM"), arch, group)
    assert fit.host_tier == pytest.approx(2 * fit.kv_cache)
    assert fit.host_tier_tokens == pytest.approx(2 * fit.max_kv_tokens, abs=2)
    per_node = host_memory_per_node(fit, group)
    assert plan(spec).roles[0].host_tier_gib_per_node == math.ceil(per_node / GIB)
    sized = RuntimeSpec.model_validate(spec_data(parallelism={"tp": 4}, **tiers({"size_gb": 100})))
    # 100 GB (SGLang reads --hicache-size in GB) on each of one node's 4 GPUs, in GiB.
    assert plan(sized).roles[0].host_tier_gib_per_node == math.ceil(400e9 / GIB)


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (tiers({"ratio": 1.0}), ("out_of_range", "kv_cache.tiers.host.ratio")),
        (
            tiers({"write_policy": "write_sometimes"}),
            ("invalid_choice", "kv_cache.tiers.host.write_policy"),
        ),
        (
            tiers({"io_backend": "kernel_ascend"}),
            ("invalid_choice", "kv_cache.tiers.host.io_backend"),
        ),
        (
            {**tiers({"size_gb": 300}), "parallelism": {"tp": 8}},
            ("hicache_host_memory", "kv_cache.tiers.host.size_gb"),
        ),
        (tiers({"ratio": 60}), ("hicache_host_memory", "kv_cache.tiers.host.ratio")),
        (tiers({"size_gb": 1}), ("hicache_host_smaller", "kv_cache.tiers.host.size_gb")),
        (
            tiers({"io_backend": "direct"}),
            ("hicache_layout_backend", "kv_cache.tiers.host.mem_layout"),
        ),
        (
            tiers({"mem_layout": "page_first_direct"}),
            ("hicache_layout_backend", "kv_cache.tiers.host.io_backend"),
        ),
        (tiers(None, FILE_STORAGE), ("hicache_storage_needs_host", "kv_cache.tiers.storage")),
        (
            tiers({"mem_layout": "layer_first"}, FILE_STORAGE),
            ("hicache_storage_layout", "kv_cache.tiers.host.mem_layout"),
        ),
        (
            tiers({}, {"backend": "file"}),
            ("hicache_file_location", "kv_cache.tiers.storage.node_path"),
        ),
        (
            tiers({}, {"backend": "file", "node_path": "/a/../etc"}),
            ("invalid_node_path", "kv_cache.tiers.storage.node_path"),
        ),
        (
            tiers({}, {"backend": "file", "claim": "Bad_Claim"}),
            ("invalid_claim", "kv_cache.tiers.storage.claim"),
        ),
        (
            tiers({}, {"backend": "mooncake", "metadata_server": "http://m:8080"}),
            ("hicache_mooncake_needs", "kv_cache.tiers.storage.master_address"),
        ),
        (
            tiers(
                {},
                {
                    "backend": "mooncake",
                    "master_address": "m:1",
                    "metadata_server": "http://m:8080",
                },
            ),
            ("hicache_mooncake_needs", "kv_cache.tiers.storage.device_name"),
        ),
        (
            tiers({}, {"backend": "hf3fs"}),
            ("hicache_backend_unplaced", "kv_cache.tiers.storage.backend"),
        ),
        (tiers({}, {"backend": "lmcache"}), ("invalid_choice", "kv_cache.tiers.storage.backend")),
        (
            {**tiers({}), "batching": {"radix_cache": False}},
            ("hicache_needs_radix_cache", "batching.radix_cache"),
        ),
    ],
)
def test_bad_tiers_are_refused_naming_the_field(
    spec_data: SpecData, groups: dict[str, Any], expected: tuple[str, str]
) -> None:
    found = errors(spec_data, **groups)
    assert expected in found, found
