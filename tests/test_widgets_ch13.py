"""Chapter 13's measuring tools and figures: peak tensor memory, the exponent fit, the five methods, the capped process,
the tile walk and the online softmax's trace."""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from tutorial_lib.efficient_attention import online_softmax
from tutorial_lib.widgets.attention_costs import (
    Cost,
    attention_methods,
    fit_exponent,
    measure_attention_costs,
    measure_training_memory,
    best_seconds,
    best_seconds_taking_turns,
    count_torch_calls,
    peak_tensor_memory,
    plot_attention_costs,
    random_qkv,
    run_under_memory_cap,
    training_methods,
    training_step_memory,
)
from tutorial_lib.widgets.copy_heads import copy_head_scores, plot_copy_heads
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.tiling import (
    WIDGET_BLOCKS,
    FULL,
    PARTIAL,
    SKIPPED,
    online_softmax_trace,
    plot_tile_grid,
    standard_attention_traffic,
    tile_counts,
    tile_grid,
    tile_grid_widget,
    tiled_attention_traffic,
)

# --- peak memory, timing, exponents -------------------------------------------------------------------------------------


def test_peak_tensor_memory_counts_what_is_alive_at_once() -> None:
    def two_then_one():
        a = torch.ones(1000)  # 4,000 bytes
        b = a * 2  # 4,000 more, both alive
        del a
        c = b[:10]  # a view: no new storage
        return c + 1  # 40 bytes while b is alive

    result, peak = peak_tensor_memory(two_then_one)
    assert torch.equal(result, torch.full((10,), 3.0))
    assert peak == 8000


def test_peak_tensor_memory_leaves_the_inputs_out_and_sees_the_score_matrix() -> None:
    q, k, v = random_qkv(256, n_heads=2, d_head=8)
    _, peak = peak_tensor_memory(lambda: torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v)
    scores = 2 * 256 * 256 * 4
    assert 2 * scores <= peak <= 2 * scores + 2 * (2 * 256 * 8 * 4)  # scores and weights alive at once, then the output


def test_fit_exponent_recovers_a_power_law() -> None:
    lengths = [256, 512, 1024, 2048]
    assert fit_exponent(lengths, [3 * n**2 for n in lengths]) == pytest.approx(2.0)
    assert fit_exponent(lengths, [0.5 * n**1.5 for n in lengths]) == pytest.approx(1.5)
    for bad in (([1], [1]), ([1, 2], [1]), ([0, 2], [1, 2]), ([2, 2], [1, 3])):
        with pytest.raises(ValueError):
            fit_exponent(*bad)


def test_best_seconds_calls_warmup_then_repeats() -> None:
    calls = []
    assert best_seconds(lambda: calls.append(1), repeats=3, warmup=2) >= 0
    assert len(calls) == 5
    with pytest.raises(ValueError, match="repeats"):
        best_seconds(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warmup"):
        best_seconds(lambda: None, warmup=-1)


def test_timed_functions_take_turns_round_by_round() -> None:
    calls = []
    best = best_seconds_taking_turns({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=2, warmup=1)
    assert calls == ["a", "b"] * 3 and set(best) == {"a", "b"} and min(best.values()) >= 0
    with pytest.raises(ValueError, match="rounds"):
        best_seconds_taking_turns({"a": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="fns"):
        best_seconds_taking_turns({})


def test_timing_on_one_thread_restores_the_thread_count() -> None:
    before, seen = torch.get_num_threads(), []
    best_seconds_taking_turns({"a": lambda: seen.append(torch.get_num_threads())}, rounds=1, warmup=0, threads=1)
    assert seen == [1] and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        best_seconds_taking_turns({"a": lambda: None}, threads=0)


def test_torch_calls_are_counted_one_by_one() -> None:
    x = torch.ones(3)
    assert count_torch_calls(lambda: None) == 0
    assert count_torch_calls(lambda: torch.exp(x)) == 1
    assert count_torch_calls(lambda: (x * 2).sum()) == 2


def test_the_five_methods_agree_where_they_should() -> None:
    q, k, v = random_qkv(96, n_heads=2, d_head=8)
    methods = attention_methods(window=96, block=32)  # a window as long as the sequence is the full causal mask
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for name in ("naive", "F.sdpa", "tiled", "banded"):
        torch.testing.assert_close(methods[name](q, k, v), expected, atol=1e-5, rtol=1e-5)
    assert methods["linear"](q, k, v).shape == expected.shape


def test_measure_attention_costs_shapes_and_memory_growth() -> None:
    costs = measure_attention_costs(attention_methods(window=16, block=16), [64, 128], n_heads=1, d_head=8, repeats=1)
    assert set(costs) == {"naive", "F.sdpa", "tiled", "banded", "linear"}
    assert all(set(by) == {64, 128} and all(isinstance(c, Cost) for c in by.values()) for by in costs.values())
    naive = costs["naive"]
    assert naive[128].peak_bytes > 3.5 * naive[64].peak_bytes  # n²
    assert costs["tiled"][128].peak_bytes < 2.5 * costs["tiled"][64].peak_bytes  # n
    assert isinstance(plot_attention_costs(costs), Figure)
    with pytest.raises(ValueError, match="lengths"):
        measure_attention_costs(attention_methods(), [0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is a Linux cap")
def test_a_memory_cap_stops_naive_attention_and_not_tiled() -> None:
    cap = 8 * 2**20  # naive needs a 16 MiB score matrix at 2,048 positions (one head)
    naive = run_under_memory_cap("naive", 2048, cap_bytes=cap, block=256, threads=1)
    tiled = run_under_memory_cap("tiled", 2048, cap_bytes=cap, block=256, threads=1)
    assert not naive.completed and "allocate" in naive.error
    assert tiled.completed and tiled.error == "" and tiled.checksum > 0
    with pytest.raises(ValueError, match="method"):
        run_under_memory_cap("banded", 2048, cap_bytes=cap)


# --- tiles and the online softmax ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_query", "n_key", "block_q", "block_k"), [(32, 32, 8, 8), (37, 53, 7, 5), (6, 29, 4, 8), (20, 20, 64, 3)])
def test_a_tile_is_partial_exactly_when_the_causal_mask_cuts_it(n_query, n_key, block_q, block_k) -> None:
    grid = tile_grid(n_query, n_key, block_q, block_k, causal=True)  # which tiles are computed: test_efficient_attention
    mask = torch.ones(n_query, n_key, dtype=torch.bool).tril(diagonal=n_key - n_query)
    for i, q_start in enumerate(range(0, n_query, block_q)):
        for j, k_start in enumerate(range(0, n_key, block_k)):
            tile = mask[q_start : q_start + block_q, k_start : k_start + block_k]
            assert grid[i, j] == (SKIPPED if not tile.any() else FULL if tile.all() else PARTIAL)


def test_tile_counts_and_pictures() -> None:
    counts = tile_counts(64, 64, 16, 16, causal=True)
    assert (counts.computed, counts.total) == (10, 16)
    assert counts.scores_computed == 10 * 256 and counts.scores_total == 64 * 64
    assert tile_counts(64, 64, 16, 16, causal=False).computed == 16
    assert isinstance(plot_tile_grid(40, 40, 16, 8), Figure)
    controls, views = live_views(tile_grid_widget(32, 8, 16))
    rows, cols = controls
    assert (rows.value, cols.value) == (8, 16) and len(views) == len(WIDGET_BLOCKS) ** 2
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)
    assert view_label(views[(0, 3)]) == "block_q = 4 · block_k = 32"
    assert 'largest score tensor: 4 × 32, not 32 × 32' in views[(0, 3)].children[1].value  # the alt text, from the title
    with pytest.raises(ValueError, match="block_k"):
        tile_grid_widget(32, 8, 12)
    with pytest.raises(ValueError, match="block_q"):
        tile_grid(8, 8, 0, 4)
    with pytest.raises(ValueError, match="n_query <= n_key"):
        tile_grid(9, 8, 4, 4)


def test_online_softmax_trace_ends_at_the_softmax(without_annotation_checks) -> None:
    x = torch.tensor([0.5, 3.0, -1.0, 2.0, 7.0, 1.0, 0.0])
    steps = online_softmax_trace(x, 3)
    assert [(s.start, s.stop) for s in steps] == [(0, 3), (3, 6), (6, 7)]
    assert [s.m for s in steps] == [3.0, 7.0, 7.0]
    assert steps[-1].l == pytest.approx(torch.exp(x.double() - 7).sum().item())
    torch.testing.assert_close(torch.exp(x - steps[-1].m) / steps[-1].l, online_softmax(x, 3))
    with without_annotation_checks(), pytest.raises(ValueError, match="1-D"):
        online_softmax_trace(x[None], 3)


# --- the copying heads --------------------------------------------------------------------------------------------------


def test_copy_head_scores_find_the_copying_head() -> None:
    length = 5
    perfect = torch.zeros(2 * length, 2 * length)
    for query in range(2 * length):
        perfect[query, query - length if query >= length else query] = 1.0
    uniform = torch.ones(2 * length, 2 * length).tril()
    uniform = uniform / uniform.sum(dim=-1, keepdim=True)
    patterns = torch.stack([uniform, perfect])[None, None]  # (batch 1, n_layers 1, n_heads 2, query_pos, key_pos)
    scores = copy_head_scores(patterns, length)
    assert scores.shape == (1, 2) and scores[0, 1] == 1.0
    assert scores[0, 0] == pytest.approx(sum(1 / (p + 1) for p in range(length, 2 * length)) / length)
    assert isinstance(plot_copy_heads({"perfect": perfect, "uniform": uniform}, length), Figure)
    with pytest.raises(ValueError, match="length"):
        copy_head_scores(patterns, 6)
    assert math.isfinite(float(scores.sum()))


# --- training memory and traffic (FlashAttention's backward, Theorem 2) ---------------------------------------------------


def test_training_memory_counts_what_autograd_keeps() -> None:
    """A step that saves an n × n matrix for the backward peaks above one that recomputes it."""
    q, k, v = random_qkv(64, n_heads=1, d_head=8)
    keeps = training_step_memory(lambda q, k, v: torch.softmax(q @ k.mT, dim=-1) @ v, q, k, v)
    assert keeps >= 64 * 64 * 4  # the weights, saved by autograd
    assert training_step_memory(lambda q, k, v: v * 2.0, q, k, v) < 64 * 64 * 4
    assert q.grad is None  # the inputs are left as they were


def test_flash_attention_training_memory_grows_as_n_and_naive_as_n_squared() -> None:
    peaks = measure_training_memory(training_methods(block=32), [128, 256, 512], n_heads=1, d_head=8)
    assert set(peaks) == {"naive", "F.sdpa", "tiled", "flash"}
    assert fit_exponent([256, 512], [peaks["naive"][n] for n in (256, 512)]) > 1.8
    assert fit_exponent([256, 512], [peaks["tiled"][n] for n in (256, 512)]) > 1.5  # every tile's weights kept
    assert fit_exponent([256, 512], [peaks["flash"][n] for n in (256, 512)]) < 1.2
    assert peaks["flash"][512] * 5 < peaks["naive"][512]
    with pytest.raises(ValueError, match="lengths"):
        measure_training_memory(training_methods(), [0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is a Linux cap")
def test_a_memory_cap_stops_tiled_training_and_not_flash() -> None:
    # Tiled with autograd keeps half of a 16 MiB score matrix (causal) at 2,048 positions, twice: it needed 48 MiB of
    # address space on an AVX-512 Xeon; flash 8 MiB, and F.sdpa 8 MiB on an AMD EPYC but 10 MiB on that Xeon (its
    # backward's blocks follow the CPU's vector width). 24 MiB parts them with a factor of 2 on either side.
    cap = 24 * 2**20
    tiled = run_under_memory_cap("tiled", 2048, cap_bytes=cap, train=True, block=256, threads=1)
    flash = run_under_memory_cap("flash", 2048, cap_bytes=cap, train=True, block=256, threads=1)
    sdpa = run_under_memory_cap("F.sdpa", 2048, cap_bytes=cap, train=True, block=256, threads=1)
    assert not tiled.completed and "allocate" in tiled.error and tiled.train
    assert flash.completed and sdpa.completed
    assert abs(flash.checksum - sdpa.checksum) < 1e-5 * sdpa.checksum


def test_traffic_counts_follow_theorem_2() -> None:
    n, d = 4096, 64
    standard = standard_attention_traffic(n, n, d)
    assert standard.total == 4 * n * d + 4 * n * n  # Algorithm 0: Θ(nd + n²)
    for block in (64, 256):
        queries_outer = tiled_attention_traffic(n, n, d, block, block)
        keys_outer = tiled_attention_traffic(n, n, d, block, block, order="keys outer")
        assert queries_outer.total == 2 * n * d + n + 2 * n * d * (n // block)  # Q, O, L once; K, V n / B times
        assert queries_outer.writes == n * (d + 1) < keys_outer.writes  # FA2 writes its output once
        m = 4 * block * d  # fast memory for blocks of M / 4d, as in FlashAttention's Algorithm 1
        assert 8 < queries_outer.total / (n * n * d * d / m) < 8.6  # Θ(n² d² / M)
    causal = tiled_attention_traffic(n, n, d, 64, 64, causal=True)
    assert causal.total < 0.6 * tiled_attention_traffic(n, n, d, 64, 64).total  # skipped tiles load nothing
    with pytest.raises(ValueError, match="order"):
        tiled_attention_traffic(n, n, d, 64, 64, order="diagonal")
    with pytest.raises(ValueError, match="block_q"):
        tiled_attention_traffic(n, n, d, 0, 64)
