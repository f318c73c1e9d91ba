import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

# chapter 08, exercise 3; named apart from the package's GPT, which exercise 5 builds in this notebook
from my_transformer.gpt import GPT as YourGPT

PARTS = ("attention", "ffn", "positions", "norms", "causal_mask")


class Removed(nn.Module):
    """What stands where a sublayer was removed: it adds nothing to the stream, whatever it is handed."""

    def forward(self, x: Float[Tensor, "batch seq d_model"], mask: Bool[Tensor, "..."] | None = None
                ) -> Float[Tensor, "batch seq d_model"]:
        # BEGIN SOLUTION
        return torch.zeros_like(x)
        # END SOLUTION


class AblatedGPT(YourGPT):
    """Your GPT without the parts named in ``remove`` (any of PARTS): a removed part computes nothing and holds no
    parameter. Any other name: ValueError, naming the argument."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh", remove=()) -> None:
        # BEGIN SOLUTION
        unknown = sorted(set(remove) - set(PARTS))
        if unknown:
            raise ValueError(f"remove must hold parts among {PARTS}, got {unknown}")
        super().__init__(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)
        self.remove = set(remove)
        for block in self.blocks:
            if "attention" in self.remove:
                block.ln_1, block.attn = nn.Identity(), Removed()
            if "ffn" in self.remove:
                block.ln_2, block.ffn = nn.Identity(), Removed()
            if "norms" in self.remove:
                block.ln_1, block.ln_2 = nn.Identity(), nn.Identity()
        if "norms" in self.remove:
            self.ln_final = nn.Identity()
        if "positions" in self.remove:
            self.pos_embed = None
        # END SOLUTION

    def forward(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq d_vocab"]:
        # BEGIN SOLUTION
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"tokens has {seq} positions, more than n_ctx={self.n_ctx}")
        x = self.embed(tokens)
        if self.pos_embed is not None:
            x = x + self.pos_embed(seq)
        mask = None
        if "causal_mask" not in self.remove:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).tril()
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.unembed(self.ln_final(x))
        # END SOLUTION
