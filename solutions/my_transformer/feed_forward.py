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
        # BEGIN SOLUTION
        if kind not in ("relu", "gelu_tanh", "swiglu"):
            raise ValueError(f"kind must be 'relu', 'gelu_tanh' or 'swiglu', got {kind!r}")
        for name, size in (("d_model", d_model), ("d_ff", d_ff)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive int, got {size!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if multiple_of is not None:
            if kind != "swiglu" or isinstance(multiple_of, bool) or not isinstance(multiple_of, int) or multiple_of < 1:
                raise ValueError(f"multiple_of must be a positive int, and only for kind 'swiglu', got {multiple_of!r}")
            hidden = int(2 * d_ff / 3)  # three matrices hold what the plain FFN's two do
            d_ff = -(-hidden // multiple_of) * multiple_of  # rounded up
        self.kind = kind
        if bias is None:
            bias = kind != "swiglu"  # LLaMA's layers have no biases
        if kind == "swiglu":
            self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)  # off in eval mode
        # END SOLUTION

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        # BEGIN SOLUTION
        if self.kind == "swiglu":
            hidden = F.silu(self.gate(x)) * self.up(x)
        else:
            hidden = self.up(x)
            hidden = torch.relu(hidden) if self.kind == "relu" else gelu_tanh(hidden)
        return self.down(self.dropout(hidden))
        # END SOLUTION
