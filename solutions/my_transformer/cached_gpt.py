import torch
from jaxtyping import Float, Int
from torch import Tensor

from my_transformer.cached_attention import cached_attention  # exercise 4
from my_transformer.gpt import GPT  # chapter 08, exercise 3
from my_transformer.merge_heads import merge_heads  # chapter 04, exercise 2
from my_transformer.split_heads import split_heads  # chapter 04, exercise 1


class KVCache:
    """Every layer's keys and values, ``(batch, n_heads, length, d_head)``, for the positions processed so far."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, d_head: int, dtype: torch.dtype = torch.float32) -> None:
        # BEGIN SOLUTION
        self.keys = [torch.zeros(batch, n_heads, 0, d_head, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(batch, n_heads, 0, d_head, dtype=dtype) for _ in range(n_layers)]
        # END SOLUTION

    @property
    def length(self) -> int:
        """The number of positions in the cache."""
        # BEGIN SOLUTION
        return self.keys[0].shape[-2]
        # END SOLUTION


class CachedGPT(GPT):
    """Your GPT of chapter 08, which also runs on tokens that continue a KV cache."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh") -> None:
        super().__init__(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)
        self.n_layers, self.n_heads, self.d_head = n_layers, n_heads, d_model // n_heads

    def make_kv_cache(self, batch: int) -> KVCache:
        return KVCache(self.n_layers, batch, self.n_heads, self.d_head, self.embed.weight.dtype)

    def forward(
        self, tokens: Int[Tensor, "batch seq"], cache: KVCache | None = None
    ) -> Float[Tensor, "batch seq d_vocab"]:
        """Logits for ``tokens``; with a cache, the tokens continue its ``cache.length`` positions and each layer's
        keys and values are appended to it."""
        if cache is None:
            return super().forward(tokens)
        # BEGIN SOLUTION
        offset = cache.length
        x = self.embed(tokens) + self.pos_embed(tokens.shape[1], offset)  # a ValueError past the context
        for i, block in enumerate(self.blocks):
            h = block.ln_1(x)
            q, k, v = (split_heads(layer(h), self.n_heads)
                       for layer in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj))
            out, cache.keys[i], cache.values[i] = cached_attention(q, k, v, cache.keys[i], cache.values[i])
            x = x + block.attn.out_proj(merge_heads(out))
            x = x + block.ffn(block.ln_2(x))
        return self.unembed(self.ln_final(x))
        # END SOLUTION
