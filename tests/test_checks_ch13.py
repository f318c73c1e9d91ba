"""Chapter 13's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.checks import check, get_exercise

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook

# --- 13.online_softmax ------------------------------------------------------------------------------------------------


def softmax_two_passes(x, block_size):
    """Correct, written differently: the maximum in a first pass over the blocks, the sum in a second."""
    blocks = list(torch.split(x, block_size, dim=-1))
    m = torch.stack([b.max(dim=-1).values for b in blocks], dim=-1).max(dim=-1, keepdim=True).values
    total = sum(torch.exp(b - m).sum(dim=-1, keepdim=True) for b in blocks)
    return torch.exp(x - m) / total


def softmax_like(**wrong):
    def online(x, block_size):
        running_max, running_sum = None, None
        n = x.shape[-1]
        starts = range(0, n - n % block_size if wrong.get("whole_blocks") else n, block_size)
        for s in starts:
            chunk = x[..., s : s + block_size]
            if wrong.get("no_max"):
                running_sum = torch.exp(chunk).sum(-1) + (0 if running_sum is None else running_sum)
                continue
            chunk_max = chunk.max(-1).values
            new_max = chunk_max if running_max is None or wrong.get("block_max") else torch.max(running_max, chunk_max)
            if running_sum is None:
                running_sum = torch.exp(chunk - new_max.unsqueeze(-1)).sum(-1)
            else:
                factor = 1.0 if wrong.get("no_rescale") else torch.exp(running_max - new_max)
                running_sum = running_sum * factor + torch.exp(chunk - new_max.unsqueeze(-1)).sum(-1)
            running_max = new_max
        if wrong.get("no_max"):
            return torch.exp(x) / running_sum.unsqueeze(-1)
        if running_sum is None:  # no block visited at all
            return torch.exp(x) / 0.0
        return torch.exp(x - running_max.unsqueeze(-1)) / running_sum.unsqueeze(-1)

    return online


# --- 13.tile_update ---------------------------------------------------------------------------------------------------


def tile_right(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start):
    """Correct, written differently: a where() for the mask and the NaN-safe shift."""
    s = torch.einsum("...qd,...kd->...qk", q_blk, k_blk)
    rows = torch.arange(q_start, q_start + s.shape[-2]).unsqueeze(1)
    cols = torch.arange(k_start, k_start + s.shape[-1]).unsqueeze(0)
    s = torch.where(cols <= rows, s, torch.tensor(float("-inf"), dtype=s.dtype))
    new_m = torch.max(m, s.max(dim=-1, keepdim=True).values)
    safe = torch.where(torch.isfinite(new_m), new_m, torch.zeros_like(new_m))
    scale = (m - safe).exp()
    e = (s - safe).exp()
    return new_m, scale * l + e.sum(-1, keepdim=True), scale * acc + torch.einsum("...qk,...kd->...qd", e, v_blk)


def tile_like(**wrong):
    def update(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start):
        s = q_blk @ k_blk.mT
        r, c = s.shape[-2:]
        if wrong.get("local"):
            visible = torch.ones(r, c, dtype=torch.bool).tril()
        else:
            qpos, kpos = torch.arange(r)[:, None] + q_start, torch.arange(c)[None, :] + k_start
            visible = kpos < qpos if wrong.get("strict") else kpos <= qpos
        if not wrong.get("unmasked"):
            s = s.masked_fill(~visible, -math.inf)
        new_m = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = new_m.nan_to_num(neginf=0.0)
        e = torch.exp(s - safe)
        alpha = torch.exp(m - safe)
        new_l = (l if wrong.get("keep_l") else alpha * l) + e.sum(-1, keepdim=True)
        new_acc = (acc if wrong.get("keep_acc") else alpha * acc) + e @ v_blk
        return new_m, new_l, new_acc

    return update


# --- 13.banded_attention ----------------------------------------------------------------------------------------------


def banded_gather(q, k, v, window):
    """Correct, written differently: index the keys of each window with a (seq, window) table."""
    seq = q.shape[-2]
    index = torch.arange(seq)[:, None] + torch.arange(-window + 1, 1)[None, :]  # (seq, window)
    valid = index >= 0
    index = index.clamp(min=0)
    k_win, v_win = k[..., index, :], v[..., index, :]  # (..., seq, window, d)
    scores = torch.einsum("...sd,...swd->...sw", q, k_win) / q.shape[-1] ** 0.5
    weights = scores.masked_fill(~valid, float("-inf")).softmax(dim=-1)
    return torch.einsum("...sw,...swd->...sd", weights, v_win)


def banded_like(**wrong):
    def banded(q, k, v, window):
        seq = q.shape[-2]
        w = window + wrong.get("extra", 0)
        index = torch.arange(seq)[:, None] + torch.arange(-w + 1, 1)[None, :]
        valid = index >= 0
        k_win, v_win = k[..., index.clamp(min=0), :], v[..., index.clamp(min=0), :]
        if not wrong.get("mask_padding", True):  # zero keys in front, as padding would give, left in the softmax
            k_win = k_win * valid[..., None]
            v_win = v_win * valid[..., None]
            valid = torch.ones_like(valid)
        scores = torch.einsum("...sd,...swd->...sw", q, k_win)
        if wrong.get("scale", True):
            scores = scores / math.sqrt(q.shape[-1])
        weights = scores.masked_fill(~valid, float("-inf")).softmax(dim=-1)
        return torch.einsum("...sw,...swd->...sd", weights, v_win)

    return banded


def banded_full(q, k, v, window):
    seq = q.shape[-2]
    band = torch.ones(seq, seq, dtype=torch.bool).tril().triu(-(window - 1))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=band)


# --- 13.causal_linear_attention ----------------------------------------------------------------------------------------


def linear_loop(q, k, v, eps=1e-6):
    """Correct, written differently: the recurrent form, one position at a time."""
    phi_q, phi_k = torch.where(q > 0, q + 1, q.exp()), torch.where(k > 0, k + 1, k.exp())
    state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    norm = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype)
    outs = []
    for i in range(q.shape[-2]):
        state = state + phi_k[..., i, :, None] * v[..., i, None, :]
        norm = norm + phi_k[..., i, :]
        num = torch.einsum("...d,...de->...e", phi_q[..., i, :], state)
        outs.append(num / ((phi_q[..., i, :] * norm).sum(-1, keepdim=True) + eps))
    return torch.stack(outs, dim=-2)


def linear_like(**wrong):
    def attention(q, k, v, eps=1e-6):
        if wrong.get("scaled"):
            q = q / q.shape[-1] ** 0.5
        fq, fk = F.elu(q) + 1, F.elu(k) + 1
        sim = fq @ fk.transpose(-2, -1)
        n = q.shape[-2]
        if not wrong.get("full"):
            sim = sim * torch.ones(n, n, dtype=q.dtype).tril(-1 if wrong.get("strict") else 0)
        if wrong.get("no_normaliser"):
            return sim @ v
        return sim @ v / (sim.sum(-1, keepdim=True) + (0.0 if wrong.get("no_eps") else eps))

    return attention


# --- 13.tile_backward -------------------------------------------------------------------------------------------------


def tile_backward_autograd(q_blk, k_blk, v_blk, out_blk, d_out_blk, lse_blk):
    """Correct, written differently: autograd on a surrogate whose derivative in the scores is P ∘ (dP - D). With
    P = exp(τ q kᵀ - L) and L held fixed, Σ P ∘ (dO Vᵀ) gives P ∘ dP and V's gradient, and - Σ P ∘ D stands for the
    row's normaliser, which one tile cannot differentiate through."""
    q, k, v = (t.detach().requires_grad_() for t in (q_blk, k_blk, v_blk))
    p = torch.exp(torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5 - lse_blk)
    delta = (d_out_blk * out_blk).sum(-1, keepdim=True)
    surrogate = (p @ v * d_out_blk).sum() - (p * delta).sum()
    return torch.autograd.grad(surrogate, (q, k, v))


def tile_backward_like(**wrong):
    def backward(q_blk, k_blk, v_blk, out_blk, d_out_blk, lse_blk):
        scale = q_blk.shape[-1] ** -0.5
        s = torch.einsum("...qd,...kd->...qk", q_blk * (scale if not wrong.get("unscaled") else 1.0), k_blk)
        if wrong.get("raw_exp"):
            p = s.exp()
        elif wrong.get("tile_softmax"):
            p = s.softmax(dim=-1)
        else:
            p = (s - lse_blk).exp()
        dv = torch.einsum("...qk,...qe->...ke", p, d_out_blk)
        dp = torch.einsum("...qe,...ke->...qk", d_out_blk, v_blk)
        if wrong.get("no_delta"):
            ds = p * dp
        else:
            partial = p @ v_blk if wrong.get("tile_delta") else out_blk
            ds = p * (dp - (partial * d_out_blk).sum(-1, keepdim=True))
        g = 1.0 if wrong.get("unscaled") or wrong.get("unscaled_grads") else scale
        return g * torch.einsum("...qk,...kd->...qd", ds, k_blk), g * torch.einsum("...qk,...qd->...kd", ds, q_blk), dv

    return backward


LEARNER_MISTAKES = [
    ("13.online_softmax", softmax_like(no_rescale=True), "sum_not_rescaled"),
    ("13.online_softmax", softmax_like(no_max=True), "no_maximum_subtracted"),
    ("13.online_softmax", softmax_like(block_max=True), "block_maximum_not_running"),
    ("13.online_softmax", softmax_like(whole_blocks=True), "dropped_partial_block"),
    ("13.tile_update", tile_like(keep_l=True), "denominator_not_rescaled"),
    ("13.tile_update", tile_like(keep_acc=True), "accumulator_not_rescaled"),
    ("13.tile_update", tile_like(keep_l=True, keep_acc=True), "nothing_rescaled"),
    ("13.tile_update", tile_like(strict=True), "causal_boundary_off_by_one"),
    ("13.tile_update", tile_like(local=True), "tile_local_positions"),
    ("13.tile_update", tile_like(unmasked=True), "no_causal_mask"),
    ("13.banded_attention", banded_like(extra=1), "window_one_too_wide"),
    ("13.banded_attention", banded_like(extra=-1), "window_one_too_narrow"),
    ("13.banded_attention", banded_like(mask_padding=False), "padding_not_masked"),
    ("13.banded_attention", banded_full, "full_score_matrix"),
    ("13.banded_attention", banded_like(scale=False), "not_scaled"),
    ("13.causal_linear_attention", linear_like(no_normaliser=True), "normaliser_forgotten"),
    ("13.causal_linear_attention", linear_like(full=True), "not_causal"),
    ("13.causal_linear_attention", linear_like(strict=True), "excluded_current_position"),
    ("13.causal_linear_attention", linear_like(scaled=True), "scaled_queries"),
    ("13.causal_linear_attention", linear_like(no_eps=True), "eps_left_out"),
    ("13.tile_backward", tile_backward_like(no_delta=True), "delta_forgotten"),
    ("13.tile_backward", tile_backward_like(tile_delta=True), "delta_from_the_tile"),
    ("13.tile_backward", tile_backward_like(raw_exp=True), "weights_not_normalised"),
    ("13.tile_backward", tile_backward_like(tile_softmax=True), "softmax_over_the_tile"),
    ("13.tile_backward", tile_backward_like(unscaled_grads=True), "scale_left_out_of_gradients"),
    ("13.tile_backward", tile_backward_like(unscaled=True), "scale_forgotten"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}" for e, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    exercises = ("13.online_softmax", "13.tile_update", "13.banded_attention", "13.causal_linear_attention",
                 "13.tile_backward")
    catalogued = {(e, m.name) for e in exercises for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("13.online_softmax", softmax_two_passes), ("13.online_softmax", softmax_like()),
    ("13.online_softmax", lambda x, block_size: torch.softmax(x, dim=-1)),
    ("13.tile_update", tile_right), ("13.tile_update", tile_like()),
    ("13.banded_attention", banded_gather), ("13.banded_attention", banded_like()),
    ("13.causal_linear_attention", linear_loop), ("13.causal_linear_attention", linear_like()),
    ("13.tile_backward", tile_backward_like()), ("13.tile_backward", tile_backward_autograd),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    assert check_recorded(exercise_id, answer).passed


def test_the_tile_reference_builds_tiled_attention():
    """Folding the exercise's tiles in order, block by block, gives PyTorch's causal attention."""
    from tutorial_lib.checks.ch13 import reference_tile_update

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 10, 8, generator=g) for _ in range(3))
    outputs = []
    for q_start in range(0, 10, 4):
        q_blk = q[:, q_start : q_start + 4] / math.sqrt(8)
        rows = q_blk.shape[1]
        m, l, acc = torch.full((2, rows, 1), float("-inf")), torch.zeros(2, rows, 1), torch.zeros(2, rows, 8)
        for k_start in range(0, q_start + rows, 3):
            m, l, acc = reference_tile_update(q_blk, k[:, k_start : k_start + 3], v[:, k_start : k_start + 3], m, l, acc,
                                              q_start, k_start)
        outputs.append(acc / l)
    torch.testing.assert_close(torch.cat(outputs, dim=1), F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_the_backward_tiles_add_up_to_autograds_gradients():
    """Summing the exercise's tiles over a row of keys gives autograd's gradients through the whole softmax."""
    from tutorial_lib.checks.ch13 import reference_tile_backward

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, n, 8, generator=g, requires_grad=True) for n in (5, 11, 11))
    out = F.scaled_dot_product_attention(q, k, v)
    d_out = torch.randn(2, 5, 8, generator=g)
    expected = torch.autograd.grad(out, (q, k, v), d_out)
    lse = torch.logsumexp(q @ k.mT / math.sqrt(8), dim=-1, keepdim=True).detach()
    q, k, v, out = q.detach(), k.detach(), v.detach(), out.detach()
    d_q, d_k, d_v = torch.zeros_like(q), [], []
    for start in range(0, 11, 4):
        part = reference_tile_backward(q, k[:, start : start + 4], v[:, start : start + 4], out, d_out, lse)
        d_q += part[0]
        d_k.append(part[1])
        d_v.append(part[2])
    for got, want in zip((d_q, torch.cat(d_k, dim=1), torch.cat(d_v, dim=1)), expected):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
