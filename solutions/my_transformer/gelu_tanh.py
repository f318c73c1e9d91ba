import math

import torch
from jaxtyping import Float
from torch import Tensor


def gelu_tanh(x: Float[Tensor, "..."]) -> Float[Tensor, "..."]:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    # BEGIN SOLUTION
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    # END SOLUTION
