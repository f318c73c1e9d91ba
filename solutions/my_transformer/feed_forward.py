import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from my_transformer.gelu_tanh import gelu_tanh  # exercise 2


class FeedForward(nn.Module):
    """The position-wise FFN of the paper (``"relu"``), GPT-2 (``"gelu_tanh"``) or LLaMA (``"swiglu"``)."""

    def __init__(self, d_model: int, d_ff: int, kind: str) -> None:
        super().__init__()
        # BEGIN SOLUTION
        if kind not in ("relu", "gelu_tanh", "swiglu"):
            raise ValueError(f"kind must be 'relu', 'gelu_tanh' or 'swiglu', got {kind!r}")
        self.kind = kind
        bias = kind != "swiglu"  # LLaMA's layers have no biases
        if kind == "swiglu":
            self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        # END SOLUTION

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        # BEGIN SOLUTION
        if self.kind == "swiglu":
            return self.down(F.silu(self.gate(x)) * self.up(x))
        hidden = self.up(x)
        hidden = torch.relu(hidden) if self.kind == "relu" else gelu_tanh(hidden)
        return self.down(hidden)
        # END SOLUTION
