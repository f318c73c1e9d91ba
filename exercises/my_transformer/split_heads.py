from jaxtyping import Float
from torch import Tensor


def split_heads(x: Float[Tensor, "batch seq d_model"], n_heads: int) -> Float[Tensor, "batch n_heads seq d_head"]:
    """Head h holds columns h·d_head … (h+1)·d_head - 1 of every position; the head axis comes before the positions."""
    raise NotImplementedError("write your solution here")
