"""Exercise checks: ``check("03.attention", scaled_dot_product_attention)`` prints one verdict.

The machinery is in :mod:`tutorial_lib.checks.core`; each chapter's exercises and catalogue of named mistakes are in
``chNN.py``, imported the first time one of its exercises is checked.

Adding chapter NN's exercises:

1. ``tutorial_lib/checks/chNN.py``: declare each :class:`Exercise` (id ``"NN.name"``, the package's reference,
   a function building seeded :class:`Case` inputs, points, what a pass checks, a hint) with its :class:`Mistake`
   catalogue, each mistake one or more small wrong implementations; end with ``register(...)``. A class exercise
   passes ``call=`` to say how a module is built and run.
2. ``solutions/NN_slug.ipynb``: the header cells, then per exercise a function whose body holds the solution between
   ``# BEGIN SOLUTION`` and ``# END SOLUTION``, followed by a cell ``check("NN.name", function)``.
3. ``make exercises`` writes and executes ``exercises/NN_slug.ipynb``; ``make test`` checks that it is in sync,
   that every catalogued mistake is named, and that the solutions score full marks.
"""

from tutorial_lib.checks.core import (
    Case,
    CheckResult,
    Exercise,
    Mistake,
    Mutant,
    WrongOutput,
    chapter_exercises,
    check,
    get_exercise,
    register,
)

__all__ = ["Case", "CheckResult", "Exercise", "Mistake", "Mutant", "WrongOutput", "chapter_exercises", "check", "get_exercise", "register"]
