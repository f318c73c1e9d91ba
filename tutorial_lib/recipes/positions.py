"""Chapter 12's comparisons, run by the ablation runner of :mod:`tutorial_lib.recipes.ablation` at a smaller scale
so that every row gets three seeds: six ways of giving a GPT positions (:data:`POSITION_CHANGES`), LLaMA's changes
added one at a time and its key/value heads shared (:data:`LLAMA_CHANGES`); a trained model carried to a longer
context, and the loss at each position of a window.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from tutorial_lib.attention import sliding_window_mask
from tutorial_lib.embeddings import LearnedPositionalEmbedding, check_sequence_fits
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.models.llama import (
    Llama,
    LlamaConfig,
    PaperInitSinusoidalGPT,
    RotaryGPT,
    SinusoidalGPT,
    UnscaledSinusoidalGPT,
    llama_d_ff,
)
from tutorial_lib.progress import announce
from tutorial_lib.recipes.ablation import ABLATION_GPT_CONFIG, ABLATION_TRAIN_CONFIG, CHANGES, AblationResult, Change, run_ablation
from tutorial_lib.recipes.char_gpt import split_batches

# The ablation runner's reference at three quarters of the width and three quarters of the depth (d_model 48, 4 heads
# of 12, 3 blocks, 32 characters of context), trained for half as many updates (300, evaluated every 50), so that the
# eleven rows of chapter 12 get three seeds each (five for the two rows whose seeds spread most) within the chapter's
# CI allowance; before, four runs at the ablation scale and one of the character recipe paid for one or three seeds
# of three rows. Measured on the shared 2-core machine, one thread, interleaved, the median of 5 rounds: an update
# costs 0.53 to 0.73 times the ablation reference's for the GPTs (learned, RoPE, sinusoidal positions) and 0.67 to
# 0.83 times for the LLaMA variants (the higher ratios under a heavier load).
COMPARISON_GPT_CONFIG = ABLATION_GPT_CONFIG.replace(d_model=48, n_layers=3)
COMPARISON_TRAIN_CONFIG = dataclasses.replace(ABLATION_TRAIN_CONFIG, max_steps=300, eval_interval=50)
COMPARISON_SEEDS = (0, 1, 2)
# Seconds an update takes on the CI machine (one thread, evaluations included): the ablation runner's 0.03 times the
# ratios above, rounded for both kinds of row; the time the cells announce.
COMPARISON_CI_SECONDS_PER_UPDATE = 0.02
# SwiGLU's hidden width at d_model 48: 8/3 · 48 = 128, three matrices of 48 × 128 hold exactly what ReLU's two of
# 48 × 192 hold.
COMPARISON_SWIGLU_D_FF = llama_d_ff(COMPARISON_GPT_CONFIG.d_model, 32)


def _llama(cfg: GPTConfig) -> nn.Module:
    # GPT's settings in LLaMA's model: RoPE and RMSNorm; the Change's config fields decide the rest.
    return Llama(LlamaConfig(**vars(cfg)))


def _llama_two_kv_heads(cfg: GPTConfig) -> nn.Module:
    return Llama(LlamaConfig(**vars(cfg), n_kv_heads=2))


def _llama_one_kv_head(cfg: GPTConfig) -> nn.Module:
    return Llama(LlamaConfig(**vars(cfg), n_kv_heads=1))


POSITION_CHANGES = {  # chapter 12's comparison of positions (n_ctx = 32)
    "learned": CHANGES["baseline"],
    "rope": Change("rope", "RoPE in every attention layer instead of learned positions", build=RotaryGPT),
    "sinusoidal": Change("sinusoidal", "the paper's sinusoidal encoding (tokens × √d_model) instead of learned positions",
                         build=SinusoidalGPT),
    "sinusoidal_unscaled": Change("sinusoidal_unscaled", "the sinusoidal encoding, tokens not scaled by √d_model",
                                  build=UnscaledSinusoidalGPT),
    "sinusoidal_paper_init": Change("sinusoidal_paper_init", "the sinusoidal encoding, tokens drawn with std 1/√d_model "
                                    "and scaled by √d_model (entries of size 1)", build=PaperInitSinusoidalGPT),
    "none": CHANGES["no_positions"],
}

_LLAMA_FFN = {"activation": "swiglu", "d_ff": COMPARISON_SWIGLU_D_FF}
_LLAMA_ALL = {**_LLAMA_FFN, "bias": False, "tie_embeddings": False}
LLAMA_CHANGES = {  # from GPT to LLaMA one change at a time, then fewer key/value heads; each row adds to the one before
    "learned": CHANGES["baseline"],
    "rope": POSITION_CHANGES["rope"],
    "rmsnorm": Change("rope_rmsnorm", "RoPE, and RMSNorm instead of LayerNorm", build=_llama),
    "swiglu": Change("rope_rmsnorm_swiglu", "RoPE, RMSNorm, and SwiGLU with d_ff 128 instead of ReLU with 192",
                     model=_LLAMA_FFN, build=_llama),
    "llama": Change("llama_mha", "LLaMA: RoPE, RMSNorm, SwiGLU, no biases, an untied head; 4 key/value heads",
                    model=_LLAMA_ALL, build=_llama),
    "gqa": Change("llama_gqa", "LLaMA with 2 key/value heads, each shared by 2 query heads", model=_LLAMA_ALL,
                  build=_llama_two_kv_heads),
    "mqa": Change("llama_mqa", "LLaMA with 1 key/value head shared by all 4 query heads", model=_LLAMA_ALL,
                  build=_llama_one_kv_head),
}


def run_comparison(changes: Mapping[str, Change], *, what: str,
                   seeds: Sequence[int] = COMPARISON_SEEDS) -> dict[str, list[AblationResult]]:
    """Every change of ``changes`` with every seed at the comparison scale, one :func:`run_ablation` each (each run
    trained once and cached); runs with the same seed share the data order and the initialisation's seed. One line
    announces the whole sweep and its expected time on the CI machine."""
    if not changes or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds) or len(seeds) < 1:
        raise ValueError(f"changes must be a non-empty mapping and seeds a sequence of ints, got {len(changes)} "
                         f"changes and seeds {seeds!r}")
    n_runs = len(changes) * len(seeds)
    steps = COMPARISON_TRAIN_CONFIG.max_steps
    expected = n_runs * steps * COMPARISON_CI_SECONDS_PER_UPDATE
    with announce(f"{what}: {n_runs} runs of {steps} updates (from the cache, or trained now)", expected):
        return {name: [run_ablation(change, seed=seed, model_cfg=COMPARISON_GPT_CONFIG, train_cfg=COMPARISON_TRAIN_CONFIG)
                       for seed in seeds]
                for name, change in changes.items()}


def with_context(model: GPT, n_ctx: int) -> GPT:
    """The same weights in a model built for ``n_ctx`` positions (evaluation beyond the training length).

    RoPE's and the sinusoidal encoding's tables are functions of the position, rebuilt for any ``n_ctx``; a learned
    position table has a row per trained position only, so a GPT with learned positions cannot be extended: that is a
    ``ValueError``."""
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
        raise ValueError(f"n_ctx must be a positive int, got {n_ctx!r}")
    table = model.pos_embed.weight if isinstance(model.pos_embed, LearnedPositionalEmbedding) else None
    if table is not None and n_ctx > table.shape[0]:
        raise ValueError(f"n_ctx={n_ctx} exceeds the learned position table of {table.shape[0]} rows: positions "
                         f"{table.shape[0]} and beyond have no embedding to look up")
    extended = type(model)(model.cfg.replace(n_ctx=n_ctx))
    extended.load_state_dict(model.state_dict() if table is None else {**model.state_dict(), "pos_embed.weight": table[:n_ctx]},
                             strict=True)
    return extended.to(next(model.parameters()).device).eval()


@torch.no_grad()
def loss_by_position(
    model: GPT, data: torch.Tensor, seq_len: int, *, window: int | None = None, batch_size: int = 64
) -> torch.Tensor:
    """The mean next-token loss at each position ``0 .. seq_len - 1`` over ``data`` cut into consecutive windows
    (:func:`split_batches`). ``window`` restricts attention to the last ``window`` keys (a sliding window): positions
    beyond it are still computed, but no query sees a key more than ``window - 1`` positions back."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive int or None, got {window!r}")
    check_sequence_fits(seq_len, model.cfg.n_ctx)
    mask = None if window is None else sliding_window_mask(seq_len, window)
    total, count = torch.zeros(seq_len, dtype=torch.float64), 0
    was_training = model.training
    model.eval()
    for x, y in split_batches(data, seq_len, batch_size):
        h = model.embed(x)
        if model.pos_embed is not None:
            h = h + model.pos_embed(seq_len)
        for block in model.blocks:
            h = block(h, mask=mask, causal=mask is None)
        logits = model.unembed(model.ln_final(h))
        losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
        total += losses.view(x.shape).sum(dim=0).double()
        count += x.shape[0]
    model.train(was_training)
    return (total / count).float()

