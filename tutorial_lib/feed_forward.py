"""The position-wise feed-forward network, Eq. (2), and its gated variant SwiGLU (chapters 05, 12)."""

from __future__ import annotations

import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

# Activations by name; "gelu_tanh" is GPT-2's tanh approximation of GELU.
ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


class FeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, applied to each position separately (Eq. (2) with act = ReLU)."""

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu", bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        return self.down(self.dropout(ACTIVATIONS[self.activation](self.up(x))))


class SwiGLU(nn.Module):
    """SwiGLU(x) = (SiLU(x W_gate) ⊙ x W_up) W_down (Shazeer 2020; LLaMA's feed-forward, no biases).

    With ``d_ff = 8/3·d_model`` it has the parameters of a plain FFN with ``d_ff = 4·d_model``.
    """

    def __init__(self, d_model: int, d_ff: int, *, bias: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        return self.down(self.dropout(F.silu(self.gate(x)) * self.up(x)))
