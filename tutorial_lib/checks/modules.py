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


def first_module_that_differs(mine: nn.Module, book: nn.Module, weights: Mapping[str, Tensor], args: tuple[Any, ...],
                              kwargs: Mapping[str, Any] | None = None) -> str | None:
    """A sentence naming the learner's first module (in the order the book's model runs them) whose output differs from
    the book's module of the same name, both run on ``weights``; None when every module agrees. torch's own layers
    (``nn.Linear``, ``nn.Embedding``, ``nn.Dropout``) are skipped: they compute what their input tells them, so a
    difference there is their parent's."""
    outputs: dict[str, dict[str, Tensor]] = {"mine": {}, "book": {}}
    order: list[str] = []
    runs = {"mine": mine, "book": book}
    hooks = []
    for who, module in runs.items():
        for name, sub in module.named_modules():
            if name and not isinstance(sub, (nn.Linear, nn.Embedding, nn.Dropout)):
                def keep(_module, _inputs, out, who=who, name=name):
                    if isinstance(out, Tensor):
                        outputs[who][name] = out.detach()
                        if who == "book":
                            order.append(name)
                hooks.append(sub.register_forward_hook(keep))
    try:
        with torch.no_grad():
            for module in runs.values():
                # not strict: a buffer outside the state dict (a sinusoidal table) stays the module's own
                torch.func.functional_call(module.eval(), dict(weights), args, dict(kwargs or {}), strict=False)
    finally:
        for hook in hooks:
            hook.remove()
    for name in order:
        got, want = outputs["mine"].get(name), outputs["book"][name]
        if got is None:
            continue
        if got.shape != want.shape:
            return (f"Your first module whose output differs from the book's model is {name}: its output has shape "
                    f"{tuple(got.shape)}, the book's {tuple(want.shape)}.")
        gap = (got.double() - want.double()).abs().max().item()
        if not gap <= 1e-5 + 1e-5 * want.abs().max().item():
            return (f"Your first module whose output differs from the book's model is {name} (max |Δ| {gap:.3g}): "
                    f"every module that runs before it agrees, so the difference arises in it or in what your forward "
                    f"does just before it.")
    return None
