"""Comparing an answer's output with the reference's, and saying what differs in terms of the output.

A verdict that names no known mistake must still tell the learner where to look: which entries differ (counted, and
located by the axes they fall on: "rows 3–5", "from position 2 on"), by how much, and the expected and obtained values
on a small slice. NaN and infinities are described as such, never as a difference of 1e38.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, no_type_check

import torch

# (rtol, atol) per dtype: torch.testing.assert_close's defaults, loose enough for any order of operations.
TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
# The least (rtol, atol) on an accelerator, whatever the exercise asks: GPUs and Apple's MPS sum in other orders (and
# CUDA may use TF32 matmuls), so a correct float32 answer there differs from the CPU's by more than rounding.
DEVICE_TOLERANCES = {
    "cuda": {torch.float16: (1e-2, 1e-3), torch.bfloat16: (3e-2, 1e-3), torch.float32: (1e-3, 1e-4),
             torch.float64: (1e-7, 1e-7)},
    "mps": {torch.float16: (1e-2, 1e-3), torch.bfloat16: (3e-2, 1e-3), torch.float32: (1e-4, 1e-5)},
}
_SLICE = 6  # values shown of the row around the first difference
_AXES_SHOWN = 3  # at most this many axes in a location


@dataclass(frozen=True)
class Failure:
    """How an output is wrong: a verdict kind and a clause that says what differs (no final full stop)."""

    kind: str
    detail: str


def describe_type(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return "None" if value is None else f"a value of type {type(value).__name__}"


# --- structure: pair the learner's tensors with the reference's --------------------------------------------------------


def _leaves(want: Any, got: Any, name: str) -> tuple[list[tuple[str, torch.Tensor, torch.Tensor]], Failure | None]:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return [], Failure("wrong_type", f"{name} should be a tensor, got {describe_type(got)}")
        if got.shape != want.shape:
            return [], Failure("wrong_shape", f"{name} has shape {tuple(got.shape)} but should have {tuple(want.shape)}")
        if got.dtype != want.dtype:
            return [], Failure("wrong_type", f"{name} has dtype {got.dtype} but should have {want.dtype}")
        if got.device != want.device:
            return [], Failure("wrong_type", f"{name} is on {got.device} but should be on {want.device}, like the inputs")
        return [(name, want, got)], None
    if isinstance(want, (tuple, list)):
        plain = not any(isinstance(item, torch.Tensor) for item in [*want, *(got if isinstance(got, (tuple, list)) else ())])
        if isinstance(got, (tuple, list)) and len(got) != len(want) and plain:
            return [], Failure("wrong_values", f"{name} is {_short(got)} but should be {_short(want)}")
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return [], Failure("wrong_type", f"{name} should be a {type(want).__name__} of {len(want)} items, got "
                                             f"{describe_type(got)}")
        pairs: list[tuple[str, torch.Tensor, torch.Tensor]] = []
        for index, (want_item, got_item) in enumerate(zip(want, got)):
            item_pairs, failure = _leaves(want_item, got_item, f"item {index} of {name}")
            if failure:
                return [], failure
            pairs.extend(item_pairs)
        return pairs, None
    if isinstance(want, dict) and isinstance(got, dict):
        return [], _mapping_failure(name, want, got)
    if type(want) is float and type(got) is float:  # compared within tolerance, as 0-d float64 tensors
        return [(name, torch.tensor(want, dtype=torch.float64), torch.tensor(got, dtype=torch.float64))], None
    if type(got) is not type(want):
        return [], Failure("wrong_type", f"{name} should be {describe_type(want)}, got {describe_type(got)}")
    if got != want:
        return [], Failure("wrong_values", f"{name} is {_short(got)} but should be {_short(want)}")
    return [], None


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mapping_failure(name: str, want: dict, got: dict) -> Failure | None:
    """A dict compared key by key: the keys missing, the keys too many, and the values that differ (a few of each)."""
    if got == want:
        return None
    missing = [key for key in want if key not in got]
    extra = [key for key in got if key not in want]
    wrong = [key for key in want if key in got and got[key] != want[key]]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key{'s' if len(missing) > 1 else ''} ({', '.join(map(repr, missing[:3]))}"
                     f"{', …' if len(missing) > 3 else ''})")
    if extra:
        parts.append(f"{len(extra)} key{'s' if len(extra) > 1 else ''} that should not be there "
                     f"({', '.join(map(repr, extra[:3]))}{', …' if len(extra) > 3 else ''})")
    if wrong:
        shown = "; ".join(f"{key!r} is {got[key]!r} but should be {want[key]!r}" for key in wrong[:3])
        parts.append(f"{len(wrong)} wrong value{'s' if len(wrong) > 1 else ''} ({shown}{'; …' if len(wrong) > 3 else ''})")
    return Failure("wrong_values", f"{name} has {', '.join(parts)}")


def named_leaves(outputs: Sequence[str], want: Any, got: Any) -> tuple[list[tuple[str, Any, Any]], Failure | None]:
    """Pairs (name, reference tensor, learner tensor), or the first way the structure differs."""
    if len(outputs) == 1:
        return _leaves(want, got, outputs[0])
    if not isinstance(got, (tuple, list)) or len(got) != len(outputs):
        return [], Failure("wrong_type", f"it should return a tuple ({', '.join(outputs)}), got {describe_type(got)}")
    pairs: list[tuple[str, Any, Any]] = []
    for name, want_item, got_item in zip(outputs, want, got):
        item_pairs, failure = _leaves(want_item, got_item, name)
        if failure:
            return [], failure
        pairs.extend(item_pairs)
    return pairs, None


# --- closeness ------------------------------------------------------------------------------------------------------------


def tolerance_for(dtype: torch.dtype, device_type: str, tolerance: tuple[float, float] | None = None) -> tuple[float, float]:
    """(rtol, atol) for comparing floats of ``dtype`` computed on a device of ``device_type`` ("cpu", "cuda", "mps").

    On the CPU: the exercise's ``tolerance``, else :data:`TOLERANCES`. On CUDA and MPS: at least
    :data:`DEVICE_TOLERANCES`, so that a correct answer run on a GPU or a Mac passes."""
    rtol, atol = tolerance or TOLERANCES.get(dtype, (1e-5, 1e-8))
    floor = DEVICE_TOLERANCES.get(device_type, {}).get(dtype)
    return (max(rtol, floor[0]), max(atol, floor[1])) if floor else (rtol, atol)


def _isclose(want: torch.Tensor, got: torch.Tensor, tolerance: tuple[float, float] | None) -> torch.Tensor:
    """Entry-wise: equal, or within tolerance for floating point; NaN equals NaN, inf equals inf of the same sign."""
    if want.is_floating_point() or want.is_complex():
        rtol, atol = tolerance_for(want.dtype, want.device.type, tolerance)
        return torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return got == want


def close(want: torch.Tensor, got: torch.Tensor, tolerance: tuple[float, float] | None) -> bool:
    return bool(_isclose(want, got, tolerance).all())


def same(a: Any, b: Any, tolerance: tuple[float, float] | None) -> bool:
    """Same structure, types, shapes and dtypes, values within tolerance (NaN equals NaN). Generators count as the
    same: how many numbers an answer drew is not part of what it did."""
    if isinstance(a, torch.Generator) and isinstance(b, torch.Generator):
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.device == b.device
            and close(a, b, tolerance)
        )
    if isinstance(a, torch.nn.Module) and isinstance(b, torch.nn.Module):
        # Two runs' copies of a case's model: the same kind of model, parameter for parameter (what an answer did to
        # the values is judged by the exercise's output, such as an initialisation's statistics).
        return a is b or (type(a) is type(b) and [(name, p.shape) for name, p in a.state_dict().items()]
                          == [(name, p.shape) for name, p in b.state_dict().items()])
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same(a[key], b[key], tolerance) for key in a))
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (
            isinstance(a, (tuple, list))
            and isinstance(b, (tuple, list))
            and len(a) == len(b)
            and all(same(x, y, tolerance) for x, y in zip(a, b))
        )
    if type(a) is float and type(b) is float:  # Python floats: within tolerance, as tensors are
        rtol, atol = tolerance if tolerance is not None else (1e-7, 0.0)
        return math.isclose(a, b, rel_tol=rtol, abs_tol=atol) or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [tensor for item in value for tensor in _tensors(item)]
    return []


def _non_finite_counts(value: Any) -> tuple[int, int, int]:
    tensors = [t for t in _tensors(value) if t.is_floating_point()]
    return (sum(int(t.isnan().sum()) for t in tensors), sum(int((t == math.inf).sum()) for t in tensors),
            sum(int((t == -math.inf).sum()) for t in tensors))


def same_but_non_finite(got: Any, finite_like: Any, non_finite_like: Any, tolerance: tuple[float, float] | None) -> bool:
    """Two mistakes seen in one output, one giving the values and the other the NaN: whether ``got`` equals
    ``finite_like`` wherever it is finite, and has non-finite entries where ``finite_like`` has none, as many NaN and
    infinities as ``non_finite_like`` has (at the same positions, or at the positions ``finite_like``'s own mistake
    moved them to, such as a swapped output)."""
    leaves: list[tuple[torch.Tensor, torch.Tensor]] = []

    @no_type_check  # defined on every call: the tests' jaxtyping hook would type-check it anew each time (see running.py)
    def collect(g: Any, a: Any) -> bool:
        if isinstance(g, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and g.shape == a.shape and g.dtype == a.dtype and g.device == a.device):
                return False
            leaves.append((g, a))
            return True
        if isinstance(g, (tuple, list)):
            return isinstance(a, (tuple, list)) and len(g) == len(a) and all(collect(*items) for items in zip(g, a))
        return same(g, a, tolerance)

    if not collect(got, finite_like):
        return False
    odd_entries = 0
    for g, a in leaves:
        if not g.is_floating_point():
            if not torch.equal(g, a):
                return False
            continue
        odd = ~torch.isfinite(g)
        if bool((odd & ~torch.isfinite(a)).any()) or not close(a[~odd], g[~odd], tolerance):
            return False
        odd_entries += int(odd.sum())
    return odd_entries > 0 and _non_finite_counts(got) == _non_finite_counts(non_finite_like)


# --- saying where and how an output differs ------------------------------------------------------------------------------


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0–2, 5, 7–8' (at most four groups, then '…')."""
    groups: list[list[int]] = []
    for index in indices:
        if groups and index == groups[-1][-1] + 1:
            groups[-1].append(index)
        else:
            groups.append([index])
    text = [f"{g[0]}–{g[-1]}" if len(g) > 2 else ", ".join(map(str, g)) for g in groups[:4]]
    return ", ".join(text) + (", …" if len(groups) > 4 else "")


def _axis_names(shape: torch.Size, names: str | None) -> list[str]:
    """Names for every axis: the declared trailing names, else 'row'/'column' for the last two, 'axis k' before."""
    declared = names.split() if names else []
    labels = [f"axis {axis}" for axis in range(len(shape))]
    if declared:
        for offset, label in enumerate(reversed(declared), start=1):
            if offset <= len(shape):
                labels[-offset] = label
    elif len(shape) >= 2:
        labels[-2:] = ["row", "column"]
    elif len(shape) == 1:
        labels[0] = "position"
    return labels


def _place(label: str, hit: list[int], size: int) -> str:
    """One axis of a location: 'rows 3–5', 'from position 2 on', 'query_pos 0, 4', 'indices 1–2 of axis 0'."""
    suffix = len(hit) > 1 and hit[0] > 0 and hit[-1] == size - 1 and len(hit) == size - hit[0]
    if label.startswith("axis "):
        if suffix:
            return f"from index {hit[0]} on along {label}"
        return f"{'index' if len(hit) == 1 else 'indices'} {_ranges(hit)} of {label}"
    if suffix:
        return f"from {label} {hit[0]} on"
    plural = label + "s" if len(hit) > 1 and label in ("row", "column", "position") else label
    return f"{plural} {_ranges(hit)}"


def locate(mask: torch.Tensor, names: str | None = None) -> str:
    """Where ``mask`` is True, e.g. 'at 12 of 96 entries (row 2, columns 3–5)' or 'at every entry'."""
    count, total = int(mask.sum()), mask.numel()
    if total == 1:
        return ""
    if count == total:
        return "at every entry"
    places = []
    for axis, label in enumerate(_axis_names(mask.shape, names)):
        if mask.shape[axis] < 2:
            continue
        other = [d for d in range(mask.dim()) if d != axis]
        hit = (mask.any(dim=other) if other else mask).nonzero().flatten().tolist()
        if len(hit) < mask.shape[axis]:
            places.append(_place(label, hit, mask.shape[axis]))
    where = f"at {count} of {total} entries"
    return where + (f" ({', '.join(places[:_AXES_SHOWN])})" if places else "")


def _number(value: float | int | bool) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def _values(row: torch.Tensor, start: int, stop: int) -> str:
    shown = ", ".join(_number(v) for v in row[start:stop].tolist())
    return "[" + ("…, " if start > 0 else "") + shown + (", …" if stop < row.numel() else "") + "]"


def show_slice(want: torch.Tensor, got: torch.Tensor, mask: torch.Tensor) -> str:
    """The expected and obtained values around the first entry where ``mask`` is True, on one row of the last axis."""
    first = tuple(mask.nonzero()[0].tolist()) if mask.dim() else ()
    if not first:
        return f"expected {_number(want.item())}, got {_number(got.item())}"
    row_index, column = first[:-1], first[-1]
    row_want, row_got = want[row_index].flatten(), got[row_index].flatten()
    start = max(0, min(column - 2, row_want.numel() - _SLICE))
    stop = min(row_want.numel(), start + _SLICE)
    at = "[" + ", ".join([*map(str, row_index), ":"]) + "]"
    suffix = " (1 = True)" if want.dtype == torch.bool else ""
    return f"at {at} expected {_values(row_want, start, stop)}, got {_values(row_got, start, stop)}{suffix}"


def tensor_failure(name: str, want: torch.Tensor, got: torch.Tensor, tolerance: tuple[float, float] | None,
                   axes: str | None = None) -> Failure | None:
    """How ``got`` differs from ``want`` (same shape, dtype and device), or None when they agree."""
    if want.is_floating_point():
        new_nan = got.isnan() & ~want.isnan()
        if new_nan.any():
            return Failure("nan", f"{name} is NaN {locate(new_nan, axes)} where the reference is not: "
                                  f"{show_slice(want, got, new_nan)}")
        lost_inf = want.isinf() & ~got.isinf()
        if lost_inf.any():
            signs = {"-inf" if v < 0 else "inf" for v in want[lost_inf].tolist()}
            return Failure("wrong_values", f"{name} should be {' or '.join(sorted(signs))} {locate(lost_inf, axes)} "
                                           f"but is finite there: {show_slice(want, got, lost_inf)}")
        new_inf = got.isinf() & ~want.isinf()
        if new_inf.any():
            return Failure("inf", f"{name} is infinite {locate(new_inf, axes)} where the reference is finite: "
                                  f"{show_slice(want, got, new_inf)}")
    wrong = ~_isclose(want, got, tolerance)
    if not wrong.any():
        return None
    text = f"{name} differs from the reference {locate(wrong, axes)}".rstrip()
    if want.is_floating_point():
        both_finite = wrong & want.isfinite() & got.isfinite()
        if both_finite.any():
            text += f" by up to {(got - want)[both_finite].abs().max().item():.3g}"
    return Failure("wrong_values", f"{text}: {show_slice(want, got, wrong)}")


def overflow_hint(got: Any) -> str:
    """What to do about an infinity where the reference is finite: +inf is an overflow, -inf an underflow's log."""
    tensors = [got] if isinstance(got, torch.Tensor) else [t for t in (got or ()) if isinstance(t, torch.Tensor)]
    positive = any(t.is_floating_point() and bool((t == float("inf")).any()) for t in tensors)
    if positive:
        return ("That is an overflow: exp() of a number above about 88 is inf in float32. Subtract the maximum before "
                "exponentiating (softmax(x) = softmax(x - max x)), or stay in log space (torch.logsumexp).")
    return ("That is an underflow: a product or probability rounded to 0, and its log is -inf. Stay in log space "
            "(torch.log_softmax, torch.logsumexp) instead of taking the log of a probability.")
