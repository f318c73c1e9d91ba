import math

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from my_transformer.block import LayerNorm  # chapter 06, exercise 5
from my_transformer.embeddings import TokenEmbedding  # chapter 02, exercise 7
from my_transformer.feed_forward import FeedForward  # chapter 05, exercise 5
from my_transformer.multi_head import MultiHeadAttention  # chapter 04, exercise 3


def sinusoidal(n_ctx: int, d_model: int) -> Float[Tensor, "n_ctx d_model"]:
    """§3.5's table as float32 (computed in float64)."""
    # BEGIN SOLUTION
    position = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table.float()
    # END SOLUTION


class EncoderLayer(nn.Module):
    """The paper's post-norm encoder layer."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.attn, self.ln_1 = MultiHeadAttention(d_model, n_heads), LayerNorm(d_model)
        self.ffn, self.ln_2 = FeedForward(d_model, d_ff, "relu"), LayerNorm(d_model)
        # END SOLUTION

    def forward(self, x: Float[Tensor, "batch seq d_model"], src_mask: Bool[Tensor, "batch 1 seq"] | None = None
                ) -> Float[Tensor, "batch seq d_model"]:
        # BEGIN SOLUTION
        x = self.ln_1(x + self.attn(x, mask=src_mask))
        return self.ln_2(x + self.ffn(x))
        # END SOLUTION


class DecoderLayer(nn.Module):
    """The paper's post-norm decoder layer: causal self-attention, cross-attention, FFN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.self_attn, self.ln_1 = MultiHeadAttention(d_model, n_heads), LayerNorm(d_model)
        self.cross_attn, self.ln_2 = MultiHeadAttention(d_model, n_heads), LayerNorm(d_model)
        self.ffn, self.ln_3 = FeedForward(d_model, d_ff, "relu"), LayerNorm(d_model)
        # END SOLUTION

    def forward(self, x: Float[Tensor, "batch query_pos d_model"], memory: Float[Tensor, "batch key_pos d_model"],
                src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None) -> Float[Tensor, "batch query_pos d_model"]:
        # BEGIN SOLUTION
        seq = x.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        x = self.ln_1(x + self.self_attn(x, mask=causal))
        x = self.ln_2(x + self.cross_attn(x, memory, mask=src_mask))
        return self.ln_3(x + self.ffn(x))
        # END SOLUTION


class Transformer(nn.Module):
    """The paper's encoder-decoder: one shared embedding matrix, sinusoidal positions, post-norm layers."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.embed = TokenEmbedding(d_vocab, d_model, scale=True)
        self.register_buffer("pe", sinusoidal(n_ctx, d_model), persistent=False)
        self.encoder_layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.decoder_layers = nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers)])
        # END SOLUTION

    def encode(self, src: Int[Tensor, "batch key_pos"], src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None
               ) -> Float[Tensor, "batch key_pos d_model"]:
        # BEGIN SOLUTION
        x = self.embedded(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return x
        # END SOLUTION

    def decode(self, tgt: Int[Tensor, "batch query_pos"], memory: Float[Tensor, "batch key_pos d_model"],
               src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None) -> Float[Tensor, "batch query_pos d_vocab"]:
        # BEGIN SOLUTION
        x = self.embedded(tgt)
        for layer in self.decoder_layers:
            x = layer(x, memory, src_mask)
        return x @ self.embed.weight.T
        # END SOLUTION

    def forward(self, src: Int[Tensor, "batch key_pos"], tgt: Int[Tensor, "batch query_pos"],
                src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None) -> Float[Tensor, "batch query_pos d_vocab"]:
        return self.decode(tgt, self.encode(src, src_mask), src_mask)

    def embedded(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq d_model"]:
        """The scaled embeddings plus the positions (a ValueError past n_ctx)."""
        # BEGIN SOLUTION
        seq = tokens.shape[1]
        if seq > self.pe.shape[0]:
            raise ValueError(f"tokens has {seq} positions, more than n_ctx={self.pe.shape[0]}")
        return self.embed(tokens) + self.pe[:seq]
        # END SOLUTION
