"""Checking a module the learner writes (the build track: their ``MultiHeadAttention``, and the modules after it).

A module exercise hands the learner's *class* to :func:`run_module`: it is built with the exercise's arguments, its
parameters must carry the names and shapes of the package's module (so that the book's trained weights load into it,
as the later chapters do), and it runs with the case's weights put in place by ``torch.func.functional_call``. The
weights are the case's own tensors, so the check compares gradients with respect to them, as for any argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from tutorial_lib.checks.core import WrongOutput


def _listed(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def build_module(cls: Any, init_args: tuple[Any, ...], what: str) -> nn.Module:
    """``cls(*init_args)``, built without touching the learner's random state; WrongOutput unless an nn.Module."""
    with torch.random.fork_rng(devices=[]):  # the initial weights it draws are replaced: keep the global RNG as it was
        torch.manual_seed(0)
        module = cls(*init_args)
    if not isinstance(module, nn.Module):
        raise WrongOutput("wrong_type", f"{what} built a {type(module).__name__}, not an nn.Module: subclass "
                                        "torch.nn.Module and call super().__init__() first in __init__")
    return module


def same_parameters(module: nn.Module, weights: Mapping[str, Tensor], what: str) -> None:
    """WrongOutput unless ``module``'s parameters and buffers have exactly the names and shapes of ``weights``."""
    own = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    expected = {name: tuple(t.shape) for name, t in weights.items()}
    if own == expected:
        return
    missing, extra = sorted(expected.keys() - own.keys()), sorted(own.keys() - expected.keys())
    parts = []
    if missing:
        parts.append(f"it lacks {_listed(missing)}")
    if extra:
        parts.append(f"it has {_listed(extra)}, which the book's module does not")
    shapes = [f"{name} is {own[name]}, expected {expected[name]}" for name in sorted(own.keys() & expected.keys())
              if own[name] != expected[name]]
    if shapes:
        parts.append("; ".join(shapes[:3]))
    raise WrongOutput("wrong_type", f"{what}'s parameters must be named and shaped as the exercise states, so that "
                                    f"the book's trained weights load into it: {'; '.join(parts)}")


def run_module(cls: Any, init_args: tuple[Any, ...], weights: Mapping[str, Tensor], args: tuple[Any, ...],
               kwargs: Mapping[str, Any] | None = None, *, what: str) -> Any:
    """Build the learner's module, check its parameters' names and shapes, and run it (in eval mode) with ``weights``."""
    module = build_module(cls, init_args, what).eval()
    same_parameters(module, weights, what)
    return torch.func.functional_call(module, dict(weights), args, dict(kwargs or {}), strict=True)
