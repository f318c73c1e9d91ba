"""Exercise checks: ``check("03.attention", scaled_dot_product_attention)`` prints one verdict.

The machinery is in :mod:`tutorial_lib.checks.core`; each chapter's exercises and catalogue of named mistakes are in
``chNN.py``, imported the first time one of its exercises is checked.

Adding chapter NN's exercises:

1. ``tutorial_lib/checks/chNN.py``: declare each :class:`Exercise` (id ``"NN.name"``, the package's reference,
   a function building seeded :class:`Case` inputs, points, what a pass checks) with its :class:`Mistake`
   catalogue (at least four, each one or more wrong implementations written as a learner writes them) and its
   :class:`Mutant` list (at least two plausible wrong answers that are *not* in the catalogue); end with
   ``register(...)``. List in ``forbidden`` what would do the exercise's work for the learner: the package's
   implementation when the reference only wraps it, and torch's functions and modules that compute the same thing
   (``F.layer_norm``, ``nn.LayerNorm``); not what the exercise lets the learner use (a sub-step that is another
   exercise's answer, the modules a case hands over). An answer that calls one of them, or the reference, scores 0
   (``tutorial_lib/checks/tracing.py``). A class exercise passes ``call=`` to say how a module is built and run; a
   ``call`` that must examine the learner's output raises :class:`WrongOutput` when it cannot. A function that draws random numbers
   takes a ``generator`` and its cases pass one: the core checks that the answer draws from it alone.
2. ``solutions/NN_slug.ipynb``: the header cells, then per exercise a function whose body holds the solution between
   ``# BEGIN SOLUTION`` and ``# END SOLUTION``, followed by a cell ``check("NN.name", function)``.
3. ``make exercises`` writes and executes ``exercises/NN_slug.ipynb``; ``make test`` checks that it is in sync,
   that the solutions score full marks, and (tests/test_check_catalogue.py, with no new test code) that every
   catalogued mistake is named as itself and no other, that every mutant loses its points without being named, that
   ignoring a generator is caught, and that every verdict's text passes the lint. ``tools/catalogue_report.py``
   prints the counts per chapter.
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
    passes,
    register,
)
from tutorial_lib.checks.prediction import record_prediction

__all__ = ["Case", "CheckResult", "Exercise", "Mistake", "Mutant", "WrongOutput", "chapter_exercises", "check", "get_exercise", "passes",
           "record_prediction", "register"]
