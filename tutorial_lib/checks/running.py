"""Running an answer on one case: the learner's (time limit, honest blame) and ours (the reference, a mistake).

Every run gets fresh copies of the case's arguments (tensors cloned, generators at the case's state), so no run sees
what another changed, and runs inside its own copy of PyTorch's global random state, so a check never moves the
notebook's random numbers. Whether the learner's code drew from that global state is recorded: an exercise that hands
over a ``generator`` expects its answer to draw from the generator alone.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, no_type_check

import torch
# torch imports this (and sympy) on the first torch.autograd.grad of a process: 3 s, over 10 on a loaded machine. Paid
# here, when the checks are imported, so that it never falls inside a learner's timed call.
import torch.fx.experimental.symbolic_shapes  # noqa: F401

from tutorial_lib.checks.tracing import CallTrace, Forbidden, is_library_file


class TimeLimitExceeded(BaseException):
    """Raised into the learner's code by the alarm: a BaseException, so ``except Exception`` cannot swallow it."""


@dataclass
class Outcome:
    """What one call did: its value or exception, the arguments afterwards, and (learner runs only) whether the learner's
    code raised the exception itself, what the learner's function last returned, and whether the global RNG moved."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    args_after: tuple[Any, ...] = ()
    raised_by_learner: bool = False
    returned: list[Any] | None = None
    global_rng_moved: bool = False
    called: str | None = None  # a forbidden callee the learner's code called (tracing.CallTrace), described


def fresh_copy(value: Any) -> Any:
    """Tensors cloned, generators copied at their current state, containers rebuilt, an object with a ``fresh_copy``
    method asked for one (a model built anew for each run); anything else as it is."""
    if callable(getattr(value, "fresh_copy", None)) and not isinstance(value, type):
        return value.fresh_copy()
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, torch.Generator):
        copy = torch.Generator(device=value.device)
        copy.set_state(value.get_state())
        return copy
    if isinstance(value, (tuple, list)):
        return type(value)(fresh_copy(item) for item in value)
    if isinstance(value, dict):
        return type(value)((key, fresh_copy(item)) for key, item in value.items())
    return value


def has_generator(args: tuple[Any, ...]) -> bool:
    return any(isinstance(arg, torch.Generator) for arg in args)


def reseeded(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments with every generator replaced by one seeded differently (derived from its state, so fixed)."""

    def swap(arg: Any) -> Any:
        if not isinstance(arg, torch.Generator):
            return arg
        seed = int(torch.randint(2**62, (1,), generator=fresh_copy(arg)).item()) + 1
        return torch.Generator(device=arg.device).manual_seed(seed)

    return tuple(swap(arg) for arg in args)


def _call_with_time_limit(fn: Callable[..., Any], args: tuple[Any, ...], seconds: float) -> Any:
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        @no_type_check  # see _recording
        def on_alarm(signum: int, frame: Any) -> None:
            raise TimeLimitExceeded

        previous_handler = signal.signal(signal.SIGALRM, on_alarm)
        # Someone else's timer (pytest-timeout uses SIGALRM too) is re-armed afterwards with what it had left.
        previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
        start = time.monotonic()
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_handler)
            if previous_delay > 0:
                left = max(previous_delay - (time.monotonic() - start), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, previous_interval)
    # Off the main thread (or without SIGALRM) a thread can be waited for but not stopped: a hang keeps running.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as error:  # handed back to the caller below
            box["error"] = error

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeLimitExceeded
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _recording(obj: Any, returned: list[Any]) -> Any:
    """A plain function wrapped so that what it returns is kept (to describe an output the check could not use);
    classes and other callables are passed through untouched."""
    if not (inspect.isfunction(obj) or inspect.ismethod(obj) or isinstance(obj, functools.partial)):
        return obj

    # no_type_check: a function defined on every run of a learner's answer; the unit tests' jaxtyping import hook would
    # wrap it in a fresh beartype check each time (half a millisecond, a third of the check catalogue's time).
    @functools.wraps(obj)
    @no_type_check
    def recorded(*args: Any, **kwargs: Any) -> Any:
        value = obj(*args, **kwargs)
        returned.append(value)
        return value

    return recorded


def _learner_frames(error: BaseException, ours: Callable[..., Any] | None = None) -> list[traceback.FrameSummary]:
    """The frames of the traceback that run code outside the package, PyTorch and the standard library, and outside
    ``ours`` (the exercise's own wrapper, wherever it is defined)."""
    own = getattr(ours, "__code__", None)
    return [
        summary for (frame, _), summary in zip(traceback.walk_tb(error.__traceback__), traceback.extract_tb(error.__traceback__))
        if frame.f_code is not own and not is_library_file(summary.filename)
    ]


def _code_objects(obj: Any) -> set[Any]:
    """The code of the learner's function, or of every method its class defines (for answers that live in the
    package itself, such as the catalogue's mistakes in the tests, whose frames are not outside the library). A
    decorated function's own code, not its decorator's: the tests' jaxtyping hook wraps every function of the package
    in one shared wrapper, which is nobody's answer."""
    obj = getattr(obj, "func", obj)  # functools.partial
    obj = getattr(obj, "__func__", obj)  # bound method
    if inspect.isclass(obj):
        return {
            inspect.unwrap(member).__code__
            for cls in obj.__mro__ if cls.__module__ not in {"builtins", "torch.nn.modules.module"}
            for member in vars(cls).values() if inspect.isfunction(member)
        }
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return {obj.__code__} if hasattr(obj, "__code__") else set()


def _raised_in(error: BaseException, codes: set[Any]) -> bool:
    return any(frame.f_code in codes for frame, _ in traceback.walk_tb(error.__traceback__))


def _refused_its_arguments(error: BaseException, obj: Any) -> bool:
    """A TypeError from calling the learner's function with arguments its signature does not take: their fault too."""
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", None))
    return isinstance(error, TypeError) and bool(name) and f"{name}()" in str(error)


def describe_error(error: BaseException, *, learner_line: bool = True) -> str:
    """``RuntimeError: message`` (its first sentence) plus the line of the learner's code that raised it, if any."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    message = re.split(r"(?<=[a-z)\]])\.\s+(?=[A-Z])", message, maxsplit=1)[0].rstrip(".")
    if len(message) > 200:
        message = message[:199] + "…"
    text = type(error).__name__ + (f": {message}" if message else "")
    for frame in reversed(_learner_frames(error) if learner_line else []):
        if frame.line:
            return f"{text} (line {frame.lineno} of your code: `{frame.line.strip()}`)"
    return text


def run_learner(run: Callable[[Any, tuple[Any, ...]], Any], obj: Any, args: tuple[Any, ...], *, calls_directly: bool,
                time_limit: float, wrapper: Callable[..., Any] | None = None, forbidden: Forbidden | None = None) -> Outcome:
    """Run the learner's ``obj`` through ``run(obj, args)`` on fresh copies of ``args``; with ``forbidden``, traced:
    ``called`` says which of those callees the learner's code called, if any.

    An exception is the learner's when the learner's function was called directly (``calls_directly``) or when a frame
    of the learner's code is on its traceback; otherwise the exercise's own ``wrapper`` failed on what the learner
    returned.
    """
    args = fresh_copy(args)
    returned: list[Any] = []
    outcome = Outcome(args_after=args, returned=returned)
    trace = CallTrace(forbidden, _code_objects(obj)) if forbidden else None
    with torch.random.fork_rng(devices=[]):  # the notebook's global random state is restored afterwards
        before = torch.random.get_rng_state()
        try:
            outcome.value = _call_with_time_limit(run if trace is None else functools.partial(trace.run, run),
                                                  (_recording(obj, returned), args), time_limit)
        except TimeLimitExceeded:
            outcome.timed_out = True
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # SystemExit too: the learner's code must not end the check
            outcome.error = error
            outcome.raised_by_learner = (
                calls_directly or bool(_learner_frames(error, wrapper)) or _raised_in(error, _code_objects(obj))
                or _refused_its_arguments(error, obj)
            )
        outcome.global_rng_moved = not torch.equal(torch.random.get_rng_state(), before)
    outcome.called = None if trace is None else trace.hit
    return outcome


def with_gradients(run: Callable[[Any, tuple[Any, ...]], Any], names: tuple[str, ...],
                   seed: int) -> Callable[[Any, tuple[Any, ...]], dict[str, torch.Tensor]]:
    """``run`` turned into a run that returns gradients: of a seeded upstream gradient, back through every
    floating-point output, with respect to every floating-point tensor argument and every parameter of every module
    argument (``{"x": ..., "sublayer.0.weight": ...}``; zeros where the output does not depend on it).

    ``torch.autograd.grad`` leaves the modules' own ``.grad`` untouched, so no run sees another's gradients."""

    def gradients(obj: Any, args: tuple[Any, ...]) -> dict[str, torch.Tensor]:
        inputs: dict[str, torch.Tensor] = {}
        for name, arg in zip(names, args):
            inputs.update(_differentiable(name, arg))
        with torch.enable_grad():
            value = run(obj, args)
            outputs = [t for t in _float_tensors(value) if t.requires_grad]
            generator = torch.Generator().manual_seed(seed)
            upstream = [torch.randn(t.shape, generator=generator, dtype=t.dtype).to(t.device) for t in outputs]
            grads = torch.autograd.grad(outputs, list(inputs.values()), upstream, allow_unused=True) if outputs else ()
        grads = grads or [None] * len(inputs)
        return {name: torch.zeros_like(x) if g is None else g.detach()
                for (name, x), g in zip(inputs.items(), grads)}

    return gradients


def _differentiable(name: str, arg: Any) -> dict[str, torch.Tensor]:
    """The floating-point tensors of an argument, named for a verdict, set to require gradients: the argument itself,
    a module's parameters (``layer.weight``), a dict's or a sequence's tensors (``weights.wq``, ``caches.0``)."""
    if isinstance(arg, torch.Tensor):
        return {name: arg.requires_grad_(True)} if arg.is_floating_point() else {}
    if isinstance(arg, torch.nn.Module):
        return {f"{name}.{key}": p for key, p in arg.named_parameters() if p.is_floating_point()}
    if dataclasses.is_dataclass(arg) and not isinstance(arg, type):  # a container of parts (chapter 07's layers)
        arg = {f.name: getattr(arg, f.name) for f in dataclasses.fields(arg)}
    items = arg.items() if isinstance(arg, dict) else enumerate(arg) if isinstance(arg, (tuple, list)) else ()
    return {key: tensor for item_name, item in items for key, tensor in _differentiable(f"{name}.{item_name}", item).items()}


def _float_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _float_tensors(item)]
    return []


def run_ours(run: Callable[[Any, tuple[Any, ...]], Any], fn: Any, args: tuple[Any, ...]) -> Outcome:
    """Run the reference or a catalogued mistake; a mistake may raise, and that exception is its behaviour."""
    args = fresh_copy(args)
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore")  # e.g. the deprecation warning of a mistake's `k.T`
        try:
            return Outcome(value=run(fn, args), args_after=args)
        except Exception as error:
            return Outcome(error=error, args_after=args)
