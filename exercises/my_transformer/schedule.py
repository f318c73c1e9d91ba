import math


def warmup_cosine_lr(step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """The learning rate of update ``step`` (0-based): linear warm-up to ``max_lr``, half a cosine to ``min_lr``."""
    raise NotImplementedError("write your solution here")
