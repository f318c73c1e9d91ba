"""No notebook asserts an absolute wall-clock time, or a speed-up without a margin (CONTRIBUTING.md, "Any CPU").

A notebook runs on a reader's laptop, on a CI machine three times slower than the one its outputs were stored on, and
beside another notebook that takes half the cores. A time measured there says nothing that a constant can bound. The
rule, checked here on every `assert` of every notebook's code cells:

- a **measured time or speed** (a name, attribute or string key whose words include one of :data:`TIMED_WORDS`:
  ``train_seconds``, ``record["seconds"]``, ``ms["DDP"]``, ``speed[8]``) is never compared with a constant (but 0:
  ``seconds > 0`` says that something was measured);
- two of them are compared only through a **margin**, a constant factor at least :data:`MIN_MARGIN` away from 1 on
  one side (``fast < slow / 2``, ``speed[1] > 0.7 * speed[8]``), since two measurements side by side keep their ratio
  on a slower machine, but not their order when they are close;
- a **ratio** of two measurements (a name with one of :data:`RATIO_WORDS`: ``speed_up``, ``time_exponent``) may be
  compared with constants, but not with 1 or a constant within the margin of 1 (a speed-up claimed without a margin).
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(str(p.relative_to(REPOSITORY)) for folder in ("chapters", "solutions", "exercises")
                   for p in (REPOSITORY / folder).glob("*.ipynb"))

TIMED_WORDS = {"seconds", "secs", "elapsed", "wall", "ms", "speed", "duration", "latency", "throughput"}
RATIO_WORDS = {"up", "speedup", "exponent", "exponents", "ratio", "factor"}
MIN_MARGIN = 1.25


def words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def _names(node: ast.AST) -> list[str]:
    """The identifiers and string keys an expression reads."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.append(sub.value)
    return out


def kind(node: ast.AST) -> str:
    """'time' (a measured time or speed), 'ratio' (of two such), 'constant' (numbers only) or 'other'."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and kind(node.left) == kind(node.right) == "time":
        return "ratio"
    names = _names(node)
    if not names:
        return "constant" if all(isinstance(n, ast.Constant | ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop)
                                 for n in ast.walk(node)) else "other"
    name_words = [words(name) for name in names]
    if any(w & TIMED_WORDS and w & RATIO_WORDS for w in name_words):
        return "ratio"
    if any(w & TIMED_WORDS for w in name_words):
        return "time"
    return "other"


def margin(node: ast.AST) -> float:
    """The constant factor that scales one side of a comparison (``0.7 * b`` -> 0.7, ``b / 2`` -> 0.5), else 1."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div):
        for side, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(side, ast.Constant) and isinstance(side.value, int | float) and side.value > 0:
                factor = side.value if isinstance(node.op, ast.Mult) or side is node.left else 1 / side.value
                return factor * margin(other)
    return 1.0


def constant_value(node: ast.AST) -> float | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return float(value) if isinstance(value, int | float) else None


def violations(source: str) -> list[str]:
    """What breaks the rule in a cell's source, one line each."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: not this test's business
        return []
    found = []
    for statement in ast.walk(tree):
        if not isinstance(statement, ast.Assert):
            continue
        for compare in ast.walk(statement.test):
            ordered = ast.Lt | ast.LtE | ast.Gt | ast.GtE
            if not isinstance(compare, ast.Compare) or not isinstance(compare.ops[0], ordered):
                continue
            sides = [compare.left, *compare.comparators]
            for left, right in zip(sides, sides[1:]):
                kinds = {kind(left), kind(right)}
                text = f"{ast.unparse(left)} vs {ast.unparse(right)}"
                if kinds == {"time", "constant"}:
                    if constant_value(right if kind(right) == "constant" else left) == 0:
                        continue  # `seconds > 0`: the time was measured, no bound on it
                    found.append(f"an absolute wall-clock time: {text}")
                elif kinds == {"time"}:
                    factor = margin(left) / margin(right)
                    if abs(math.log(factor)) < math.log(MIN_MARGIN):
                        found.append(f"two timings compared without a margin of {MIN_MARGIN}: {text}")
                elif kinds == {"ratio", "constant"}:
                    value = constant_value(right if kind(right) == "constant" else left)
                    if value is not None and abs(math.log(max(value, 1e-9))) < math.log(MIN_MARGIN):
                        found.append(f"a speed-up compared with {value:g}, within the margin of 1: {text}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_no_notebook_asserts_an_absolute_time_or_a_speed_up_without_a_margin(path):
    cells = json.loads((REPOSITORY / path).read_text())["cells"]
    problems = [f"cell {i}: {problem}" for i, cell in enumerate(cells) if cell["cell_type"] == "code"
                for problem in violations("".join(cell["source"]))]
    assert not problems, f"{path}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "problem"),
    [("assert train_seconds < 600", "absolute"),
     ('assert record["seconds"] < 900 and x', "absolute"),
     ("assert train_seconds[300] < train_seconds[2000] < 60", "absolute"),
     ("assert costs[n].seconds < costs['naive'].seconds", "without a margin"),
     ("assert speed[2] > 1.1 * speed[8]", "without a margin"),
     ("assert speed_up > 1", "within the margin"),
     ("assert fast_seconds / slow_seconds < 1", "within the margin")],
)
def test_the_rule_catches_what_it_forbids(source, problem):
    assert any(problem in v for v in violations(source)), violations(source)


@pytest.mark.parametrize(
    "source",
    ["assert speed[2] > 0.7 * speed[8]", 'assert ms["DDP"] < 1.5 * ms["per tensor"]', "assert fast < slow",
     "assert costs[n].seconds < costs['naive'].seconds / 2", "assert 0.5 < speed_up < 2.2",
     "assert 1.3 < time_exponent < 3.4", "assert loading_seconds < train_seconds / 10", "assert loss < 2.0",
     'assert speed[2]["comm_ms_per_step"] > 0'],
)
def test_the_rule_allows_ratios_with_margins(source):
    assert violations(source) == []
