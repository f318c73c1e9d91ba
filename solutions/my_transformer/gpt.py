import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from my_transformer.block import Block, LayerNorm  # chapter 06, exercise 5
from my_transformer.embeddings import PositionEmbedding, TokenEmbedding  # chapter 02, exercise 7


class GPT(nn.Module):
    """A decoder-only GPT: embeddings, pre-norm causal blocks, a final LayerNorm, an unembedding tied to the tokens'."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh") -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.n_ctx = n_ctx
        self.embed = TokenEmbedding(d_vocab, d_model)
        self.pos_embed = PositionEmbedding(n_ctx, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, d_ff, kind) for _ in range(n_layers)])
        self.ln_final = LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, d_vocab, bias=False)
        self.unembed.weight = self.embed.weight  # tied: one Parameter, read by both
        # END SOLUTION

    def forward(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq d_vocab"]:
        # BEGIN SOLUTION
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"tokens has {seq} positions, more than n_ctx={self.n_ctx}")
        x = self.embed(tokens) + self.pos_embed(seq)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).tril()  # a position reads itself and the past
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.unembed(self.ln_final(x))
        # END SOLUTION
