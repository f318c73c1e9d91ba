"""The KV cache as a data structure: what it stores, what it returns, when it refuses."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.kv_cache import KVCache, LayerKVCache


def test_append_returns_everything_so_far():
    cache = LayerKVCache(2, 3, 6, 4)
    k1, v1 = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 2, 4)
    k2, v2 = torch.randn(2, 3, 3, 4), torch.randn(2, 3, 3, 4)
    cache.append(k1, v1)
    keys, values = cache.append(k2, v2)
    assert cache.length == 5 and cache.max_len == 6
    assert torch.equal(keys, torch.cat([k1, k2], dim=2))
    assert torch.equal(values, torch.cat([v1, v2], dim=2))


def test_append_copies_its_inputs():
    """Later in-place changes to the caller's tensors must not rewrite the past."""
    cache = LayerKVCache(1, 1, 4, 2)
    k, v = torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2)
    cache.append(k, v)
    k.zero_()
    v.zero_()
    keys, values = cache.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    assert keys[0, 0, 0].tolist() == [1.0, 1.0] and values[0, 0, 0].tolist() == [1.0, 1.0]


def test_overflow_and_batch_mismatch_raise():
    cache = LayerKVCache(2, 1, 3, 2)
    cache.append(torch.randn(2, 1, 2, 2), torch.randn(2, 1, 2, 2))
    with pytest.raises(ValueError, match="max_len=3"):
        cache.append(torch.randn(2, 1, 2, 2), torch.randn(2, 1, 2, 2))
    assert cache.length == 2, "a refused append must leave the cache as it was"
    with pytest.raises(ValueError, match="batch"):
        cache.append(torch.randn(1, 1, 1, 2), torch.randn(1, 1, 1, 2))


def test_kv_cache_layers_and_reset():
    cache = KVCache(3, batch=2, n_heads=4, max_len=5, d_head=8, dtype=torch.float64)
    assert len(cache) == 3 and cache.max_len == 5 and cache.length == 0
    assert cache[0] is not cache[1]
    assert cache[2].keys.shape == (2, 4, 5, 8) and cache[2].keys.dtype == torch.float64
    for layer in cache.layers:
        layer.append(torch.randn(2, 4, 3, 8, dtype=torch.float64), torch.randn(2, 4, 3, 8, dtype=torch.float64))
    assert cache.length == 3
    cache.reset()
    assert cache.length == 0 and all(layer.length == 0 for layer in cache.layers)
    keys, _ = cache[1].append(torch.ones(2, 4, 1, 8, dtype=torch.float64), torch.ones(2, 4, 1, 8, dtype=torch.float64))
    assert keys.shape == (2, 4, 1, 8) and keys.eq(1).all()


def test_the_cache_reports_its_bytes_and_the_bytes_a_token_costs():
    cache = KVCache(3, 2, 4, 10, 8)  # 3 layers, batch 2, 4 heads, 10 positions, d_head 8, float32
    assert cache.nbytes == 3 * 2 * (2 * 4 * 10 * 8) * 4 == sum(layer.nbytes for layer in cache.layers)
    assert cache.bytes_per_token() == 2 * 3 * 4 * 8 * 4  # a key and a value per head and layer, 4 bytes each
    half = KVCache(3, 1, 4, 10, 8, dtype=torch.bfloat16)
    assert half.bytes_per_token() == cache.bytes_per_token() / 2
