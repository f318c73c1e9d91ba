import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from my_transformer.gelu_tanh import gelu_tanh  # exercise 2


class FeedForward(nn.Module):
    """The position-wise FFN of the paper (``"relu"``), GPT-2 (``"gelu_tanh"``) or LLaMA (``"swiglu"``)."""

    def __init__(self, d_model: int, d_ff: int, kind: str, *, bias: bool | None = None, dropout: float = 0.0,
                 multiple_of: int | None = None) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        raise NotImplementedError("write your solution here")
