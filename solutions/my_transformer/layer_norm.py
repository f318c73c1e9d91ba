import torch
from jaxtyping import Float
from torch import Tensor


def layer_norm(
    x: Float[Tensor, "*batch d_model"], weight: Float[Tensor, " d_model"], bias: Float[Tensor, " d_model"], eps: float
) -> Float[Tensor, "*batch d_model"]:
    """(x - mean) / sqrt(var + eps) * weight + bias, statistics over the last axis."""
    # BEGIN SOLUTION
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias
    # END SOLUTION
