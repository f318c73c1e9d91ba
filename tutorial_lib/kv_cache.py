"""The key/value cache that makes generation linear instead of quadratic (chapter 10).

At each generated token, attention needs the keys and values of every earlier position. They do not change (a
causal model never lets an old position see a new one), so we compute them once and keep them here.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor


class LayerKVCache:
    """Keys and values of one attention layer, preallocated for ``max_len`` positions."""

    def __init__(self, batch: int, n_heads: int, max_len: int, d_head: int, *, device=None, dtype=torch.float32) -> None:
        self.keys = torch.zeros(batch, n_heads, max_len, d_head, device=device, dtype=dtype)
        self.values = torch.zeros_like(self.keys)
        self.length = 0  # positions stored so far

    @property
    def max_len(self) -> int:
        return self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        """The memory the preallocated keys and values hold, in bytes."""
        return self.keys.nbytes + self.values.nbytes

    def append(
        self, k: Float[Tensor, "batch n_heads seq d_head"], v: Float[Tensor, "batch n_heads seq d_head"]
    ) -> tuple[Float[Tensor, "batch n_heads key_pos d_head"], Float[Tensor, "batch n_heads key_pos d_head"]]:
        """Store the new positions' keys and values; return those of every position so far."""
        start, end = self.length, self.length + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"the cache holds max_len={self.max_len} positions; appending {k.shape[-2]} to {start} overflows it")
        if k.shape[0] != self.keys.shape[0]:
            raise ValueError(f"k has batch {k.shape[0]} but the cache was made for batch {self.keys.shape[0]}")
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]


class KVCache:
    """One :class:`LayerKVCache` per layer; ``length`` is the number of positions already processed."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, max_len: int, d_head: int, *, device=None, dtype=torch.float32) -> None:
        self.layers = [LayerKVCache(batch, n_heads, max_len, d_head, device=device, dtype=dtype) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    @property
    def max_len(self) -> int:
        return self.layers[0].max_len

    @property
    def nbytes(self) -> int:
        """The memory of every layer's keys and values, in bytes (preallocated for ``max_len`` positions)."""
        return sum(layer.nbytes for layer in self.layers)

    def bytes_per_token(self) -> float:
        """What one more position costs: ``nbytes`` over ``max_len`` and over the batch (2 · n_layers · heads ·
        d_head numbers per token of each sequence: a key and a value per head and layer)."""
        return self.nbytes / self.max_len / self.layers[0].keys.shape[0]

    def reset(self) -> None:
        for layer in self.layers:
            layer.length = 0

    def __getitem__(self, layer: int) -> LayerKVCache:
        return self.layers[layer]

    def __len__(self) -> int:
        return len(self.layers)
