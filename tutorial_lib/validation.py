"""Argument checks shared by the public functions a learner calls: bad input gets an error that names the argument.

An integer argument accepts what Python and NumPy call an integer (``5``, ``np.int64(5)``), never a bool; an error
message quotes the argument it refuses, shortened when it is long (a whole text or tensor is not a message).
"""

from __future__ import annotations

import numbers

SHORT = 80  # characters of an argument quoted in an error message


def shortened(value: object, limit: int = SHORT) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error message quotes the argument, not all of it."""
    text = repr(int(value)) if is_int(value) else repr(value)  # np.int64(5) is quoted as 5
    return text if len(text) <= limit else f"{text[:limit - 15]}… ({len(text)} characters)"


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer as Python and NumPy count them (``5``, ``np.int64(5)``), a bool excluded."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (a Python or NumPy integer, not a bool), at least ``minimum``; else ``ValueError``."""
    if not is_int(value) or (minimum is not None and value < minimum):
        bound = {None: "an int", 0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{name} must be {bound}, got {shortened(value)}")
    return int(value)


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an ``int`` >= 1 (``np.int64(5)`` accepted, ``True`` and ``5.0`` refused)."""
    return check_int(name, value, minimum=1)


def check_non_negative_int(name: str, value: object) -> int:
    """``value`` as an ``int`` >= 0."""
    return check_int(name, value, minimum=0)


def check_real(name: str, value: object) -> float:
    """``value`` as a ``float`` (a Python or NumPy real number, not a bool, not NaN); else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
        raise ValueError(f"{name} must be a number, got {shortened(value)}")
    return float(value)


__all__ = ["check_int", "check_non_negative_int", "check_positive_int", "check_real", "is_int", "shortened"]



def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape that ``shapes`` broadcast to, or None when they do not. ``torch.broadcast_shapes`` does the same, but
    its first call in a process imports sympy (about 3 s, 10 under load), which would fall inside a learner's timed
    check."""
    longest = max((len(shape) for shape in shapes), default=0)
    padded = [(1,) * (longest - len(shape)) + tuple(shape) for shape in shapes]  # a missing leading axis is 1
    result = []
    for sizes in zip(*padded):
        wanted = {size for size in sizes if size != 1}
        if len(wanted) > 1:
            return None
        result.append(wanted.pop() if wanted else 1)
    return tuple(result)
