"""Exercise checks: ``check("03.attention", scaled_dot_product_attention)`` prints one verdict.

The machinery is in :mod:`tutorial_lib.checks.core`; each chapter's exercises and catalogue of named mistakes are in
``chNN.py``, imported the first time one of its exercises is checked.
"""

from tutorial_lib.checks.core import (
    Case,
    CheckResult,
    Exercise,
    Mistake,
    chapter_exercises,
    check,
    get_exercise,
    register,
)

__all__ = ["Case", "CheckResult", "Exercise", "Mistake", "chapter_exercises", "check", "get_exercise", "register"]
