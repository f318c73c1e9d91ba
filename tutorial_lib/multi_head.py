"""Multi-head attention, §3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O (chapter 04).

Two forms with the same parameters (so the same ``state_dict``) and the same outputs:
:class:`MultiHeadAttention` splits the heads with one reshape; :class:`MultiHeadAttentionLoop` runs a Python loop
over heads, exactly as the equation reads.
"""

from __future__ import annotations

import torch
from einops import rearrange
from jaxtyping import Bool, Float
from torch import Tensor, nn

from tutorial_lib.attention import attention, causal_attention, causal_mask, scaled_dot_product_attention
from tutorial_lib.kv_cache import LayerKVCache


def split_heads(x: Float[Tensor, "batch seq d_model"], n_heads: int) -> Float[Tensor, "batch n_heads seq d_head"]:
    """Cut the last axis into ``n_heads`` consecutive slices of d_head = d_model / n_heads, one per head, and move
    the head axis in front of the positions (the reshape, then the transpose)."""
    return rearrange(x, "batch seq (n_heads d_head) -> batch n_heads seq d_head", n_heads=n_heads)


def merge_heads(z: Float[Tensor, "batch n_heads seq d_head"]) -> Float[Tensor, "batch seq d_model"]:
    """Concat(head_1, ..., head_h): the heads' outputs side by side on the last axis, head 1 first."""
    return rearrange(z, "batch n_heads seq d_head -> batch seq (n_heads d_head)")


class MultiHeadAttention(nn.Module):
    """Self-attention (``context=None``) or cross-attention (keys and values from ``context``).

    ``mask`` is boolean (True = may attend), broadcastable to ``(batch, query_pos, key_pos)``; the head axis is added
    here. ``causal=True`` adds the causal mask (offset by the cache's length). ``fast=True`` uses PyTorch's fused
    kernel; the readable path is the chapter-03 function.
    """

    def __init__(self, d_model: int, n_heads: int, *, bias: bool = True, fast: bool = False) -> None:
        super().__init__()
        if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
            raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.fast = fast
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q of every head, stacked
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def forward(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        context: Float[Tensor, "batch key_pos d_model"] | None = None,
        *,
        mask: Bool[Tensor, "..."] | None = None,
        causal: bool = False,
        cache: LayerKVCache | None = None,
    ) -> Float[Tensor, "batch query_pos d_model"]:
        q, k, v = self._heads(x, context, cache)
        if causal and mask is None:
            z = causal_attention(q, k, v, fast=self.fast)
        else:
            z = attention(q, k, v, self._full_mask(mask, causal, q.shape[-2], k.shape[-2], x.device), fast=self.fast)
        return self.out_proj(merge_heads(z))

    def forward_with_weights(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        context: Float[Tensor, "batch key_pos d_model"] | None = None,
        *,
        mask: Bool[Tensor, "..."] | None = None,
        causal: bool = False,
    ) -> tuple[Float[Tensor, "batch query_pos d_model"], Float[Tensor, "batch n_heads query_pos key_pos"]]:
        """The readable path, also returning every head's attention weights (for the pattern viewers)."""
        q, k, v = self._heads(x, context, None)
        z, weights = scaled_dot_product_attention(q, k, v, self._full_mask(mask, causal, q.shape[-2], k.shape[-2], x.device))
        return self.out_proj(merge_heads(z)), weights

    def _heads(self, x: Tensor, context: Tensor | None, cache: LayerKVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        source = x if context is None else context
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(source), self.n_heads)
        v = split_heads(self.v_proj(source), self.n_heads)
        if cache is not None:
            k, v = cache.append(k, v)
        return q, k, v

    @staticmethod
    def _full_mask(mask: Tensor | None, causal: bool, n_query: int, n_key: int, device: torch.device) -> Tensor | None:
        if mask is not None and mask.dim() >= 3:
            mask = mask.unsqueeze(-3)  # (batch, query_pos, key_pos) -> (batch, 1, query_pos, key_pos): every head
        if causal:
            causal_part = causal_mask(n_query, device=device, n_past=n_key - n_query)
            mask = causal_part if mask is None else mask & causal_part
        return mask


class MultiHeadAttentionLoop(MultiHeadAttention):
    """Main difference with :class:`MultiHeadAttention`: one head at a time, slicing each head's rows of W^Q, W^K,
    W^V, then Concat and W^O, exactly as §3.2.2 writes it. Same parameters, same outputs; slower."""

    def forward(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        context: Float[Tensor, "batch key_pos d_model"] | None = None,
        *,
        mask: Bool[Tensor, "..."] | None = None,
        causal: bool = False,
        cache: LayerKVCache | None = None,
    ) -> Float[Tensor, "batch query_pos d_model"]:
        if cache is not None:
            raise ValueError("cache is not supported by the per-head loop; use MultiHeadAttention")
        source = x if context is None else context
        mask = self._full_mask(mask, causal, x.shape[1], source.shape[1], x.device)
        if mask is not None and mask.dim() == 4:
            mask = mask.squeeze(-3)  # there is no head axis inside the loop
        heads = []
        for h in range(self.n_heads):
            rows = slice(h * self.d_head, (h + 1) * self.d_head)
            q_h = self._project_head(self.q_proj, x, rows)
            k_h = self._project_head(self.k_proj, source, rows)
            v_h = self._project_head(self.v_proj, source, rows)
            heads.append(scaled_dot_product_attention(q_h, k_h, v_h, mask)[0])
        return self.out_proj(torch.cat(heads, dim=-1))  # Concat(head_1, ..., head_h) W^O

    @staticmethod
    def _project_head(proj: nn.Linear, x: Tensor, rows: slice) -> Tensor:
        bias = proj.bias[rows] if proj.bias is not None else None
        return nn.functional.linear(x, proj.weight[rows], bias)
