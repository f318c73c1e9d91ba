"""What an answer calls while it runs: an answer that hands the exercise's work to the package or to torch scores 0.

A check runs the learner's answer under a :class:`CallTrace`, a profile hook (``sys.setprofile``) that sees every
Python function entered and every built-in function called. Some callees are *the work* of the exercise: the package's
implementation of it, and the torch functions and modules that each exercise names (``F.scaled_dot_product_attention``
for attention, ``nn.LayerNorm`` for LayerNorm, ...): :class:`Forbidden`, declared with the exercise. A call to one of
them counts when the learner's code is on the stack below it: directly, through a helper the learner
wrote, through a model's ``forward`` or a module's ``__call__``. A call that the check's own wrapper makes does not.

It is decided at run time, by what runs, not by reading the answer's text: an alias, an import under another name, a
subclass or a lambda are all seen. What an exercise allows (the learner's own earlier answers, ``torch.softmax`` in
attention, the blocks of the model a case hands over) stays allowed, since only the listed callees count.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, no_type_check

import torch

from tutorial_lib import attention, multi_head

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
# Code in these folders is never the learner's own: the package, torch and the rest of the installed libraries.
LIBRARY_DIRS = tuple(
    str(Path(path).resolve()) + os.sep  # a separator at the end: "tutorial_lib_mine/" is not inside "tutorial_lib/"
    for path in (
        _PACKAGE_DIR,
        Path(torch.__file__).parent,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    )
)


@functools.lru_cache(maxsize=4096)
def is_library_file(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(LIBRARY_DIRS)


def callee_codes(obj: Any) -> set[CodeType]:
    """The code objects that running ``obj`` enters: a function's own, or every method a class defines itself (a
    module's ``forward``, a sampler's ``__iter__``, its ``__init__``), so that a subclass or an instance is seen too."""
    obj = getattr(obj, "func", obj)  # functools.partial
    obj = getattr(obj, "__func__", obj)  # a bound or class method
    if inspect.isclass(obj):
        codes = set()
        for member in vars(obj).values():
            member = getattr(member, "__func__", member)  # staticmethod, classmethod
            if inspect.isfunction(member):
                codes.add(inspect.unwrap(member).__code__)
        return codes
    if inspect.isfunction(obj):
        return {inspect.unwrap(obj).__code__}
    return set()


def describe_callee(obj: Any) -> str:
    """How a verdict names a callee: torch's `F.scaled_dot_product_attention`, torch's `nn.LayerNorm`, `GPT.forward`
    from `tutorial_lib.models.gpt`."""
    module = getattr(obj, "__module__", None) or ""
    if inspect.isbuiltin(obj):  # torch's C functions: their qualname names an internal class
        name = obj.__name__
        prefix = "F." if module in {"torch._C._nn", "torch.nn.functional"} else "torch."
        return f"torch's `{prefix}{name}`"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    if "<locals>" in name:  # a function a factory made: its own name
        name = obj.__name__
    if module.startswith("torch.nn.modules"):
        return f"torch's `nn.{name}`"
    if module == "torch.nn.functional":
        return f"torch's `F.{name}`"
    if module.startswith("torch"):
        public = {"torch.distributed.distributed_c10d": "torch.distributed", "torch.utils.data.distributed": "torch.utils.data"}
        return f"torch's `{public.get(module, module)}.{name}`"
    return f"`{name}` from `{module}`"


class Forbidden:
    """Callees that do an exercise's work, compiled once: code objects (functions, every method of a class) and
    built-ins (looked up by identity), each with the description a verdict gives; and whole packages (``modules``:
    ``("tutorial_lib",)``), every function defined in them (a prediction may not run the package's measurement, nor
    the models and helpers it is made of)."""

    def __init__(self, callees: Iterable[Any], modules: Iterable[str] = ()) -> None:
        self.codes: dict[CodeType, str] = {}
        self.builtins: dict[Any, str] = {}
        self.modules = tuple(modules)
        for callee in callees:
            codes = callee_codes(callee)
            if codes:
                self.codes.update(dict.fromkeys(codes, describe_callee(callee)))
            elif callable(callee):
                self.builtins[callee] = describe_callee(callee)
            else:
                raise ValueError(f"a forbidden callee must be a function, a class or a built-in, got {callee!r}")

    def __bool__(self) -> bool:
        return bool(self.codes or self.builtins or self.modules)

    def in_modules(self, module: str) -> bool:
        """Whether a function defined in ``module`` (a frame's ``__name__``) lies in one of the forbidden packages."""
        return any(module == prefix or module.startswith(prefix + ".") for prefix in self.modules)


class CallTrace:
    """``trace = CallTrace(forbidden, learner_codes); trace.run(fn, *args)`` records the first forbidden callee that
    the learner's code calls while ``fn`` runs (``trace.hit``, its description), or leaves ``hit`` None.

    ``learner_codes`` are code objects that count as the learner's wherever they are defined (the tests plant answers
    inside the package); any frame whose file lies outside :data:`LIBRARY_DIRS` counts too (a notebook cell, the
    learner's own module).
    """

    def __init__(self, forbidden: Forbidden, learner_codes: Iterable[CodeType] = ()) -> None:
        self.forbidden = forbidden
        self.codes = forbidden.codes
        self.builtins = forbidden.builtins
        self.learner_codes = frozenset(learner_codes)
        self.hit: str | None = None
        self._entry: FrameType | None = None

    def _from_learner(self, frame: FrameType | None) -> bool:
        while frame is not None and frame is not self._entry:
            code = frame.f_code
            if code in self.learner_codes or not is_library_file(code.co_filename):
                return True
            frame = frame.f_back
        return False

    # no_type_check: called on every Python call while a check runs (see running._recording on the tests' hook).
    @no_type_check
    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.hit is not None:
            return
        if event == "call":
            code = frame.f_code
            label = self.codes.get(code)
            if label is None and self.forbidden.modules and code not in self.learner_codes:
                module = frame.f_globals.get("__name__") or ""
                if self.forbidden.in_modules(module):
                    label = f"`{code.co_qualname}` from `{module}`"
            if label is not None and self._from_learner(frame.f_back):
                self.hit = label
        elif event == "c_call":
            try:
                label = self.builtins.get(arg)
            except TypeError:  # an unhashable callable: never one of ours
                return
            if label is not None and self._from_learner(frame):
                self.hit = label

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` under the trace, in the calling thread and the threads it starts. This call's frame and older
        ones never count: the notebook cell that called ``check`` is not the answer."""
        self._entry = sys._getframe()  # this very frame, even when a decorator wraps the method
        previous, previous_for_threads = sys.getprofile(), threading.getprofile()
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)  # and in the threads it starts (chapter 15's simulated ranks)
        try:
            return fn(*args)
        finally:
            sys.setprofile(previous)
            threading.setprofile(previous_for_threads)
            self._entry = None


# What computes attention for an answer that should: torch's fused function and module, and the package's own.
ATTENTION_CALLEES = (
    torch.nn.functional.scaled_dot_product_attention, torch.nn.functional.multi_head_attention_forward,
    torch.nn.MultiheadAttention, attention.scaled_dot_product_attention, attention.attention,
    attention.causal_attention, multi_head.MultiHeadAttention,
)
