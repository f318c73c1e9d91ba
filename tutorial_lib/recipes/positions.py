"""Chapter 12's comparison of positions, at the ablation runner's scale: learned positions, RoPE and the paper's
sinusoidal encoding as changes of :mod:`tutorial_lib.recipes.ablation`, a trained model carried to a longer context,
and the loss at each position of a window.

(The LLaMA variant of chapter 09's model, the other comparison of chapter 12, is a run of the character recipe:
:data:`~tutorial_lib.recipes.char_gpt.CHAR_LLAMA_CONFIG`.)
"""

from __future__ import annotations

import torch

from tutorial_lib.attention import sliding_window_mask
from tutorial_lib.embeddings import LearnedPositionalEmbedding, check_sequence_fits
from tutorial_lib.models.gpt import GPT
from tutorial_lib.models.llama import RotaryGPT, SinusoidalGPT
from tutorial_lib.recipes.ablation import CHANGES, Change
from tutorial_lib.recipes.char_gpt import split_batches

POSITION_CHANGES = {  # chapter 12's comparison of positions, at the ablation runner's scale (n_ctx = 32)
    "learned": CHANGES["baseline"],
    "rope": Change("rope", "RoPE in every attention layer instead of learned positions", build=RotaryGPT),
    "sinusoidal": Change("sinusoidal", "the paper's sinusoidal encoding (tokens × √d_model) instead of learned positions",
                         build=SinusoidalGPT),
}


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

