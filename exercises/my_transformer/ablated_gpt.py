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
        raise NotImplementedError("write your solution here")


class AblatedGPT(YourGPT):
    """Your GPT without the parts named in ``remove`` (any of PARTS): a removed part computes nothing and holds no
    parameter. Any other name: ValueError, naming the argument."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh", remove=()) -> None:
        raise NotImplementedError("write your solution here")

    def forward(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq d_vocab"]:
        raise NotImplementedError("write your solution here")
