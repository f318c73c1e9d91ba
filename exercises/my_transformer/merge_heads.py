from jaxtyping import Float
from torch import Tensor


def merge_heads(z: Float[Tensor, "batch n_heads seq d_head"]) -> Float[Tensor, "batch seq d_model"]:
    """Concat(head_1, ..., head_h): every head's d_head columns side by side, head 1 first."""
    raise NotImplementedError("write your solution here")
