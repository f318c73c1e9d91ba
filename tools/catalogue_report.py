"""How the checks treat every known wrong answer, per chapter: a table for maintainers and closing notes.

For each chapter: its exercises; the catalogued mistakes' variants and how many are named as themselves (the
confusion test's figure); the mutants (uncatalogued wrong answers) and how many lose their points, how many get a
verdict that names a mistake (always wrongly: they are not in the catalogue) and how many are described by their
output instead; the pairs of mistakes the catalogue's builders make together (tutorial_lib.checks.compound), how many
verdicts name both, and how many name one (the compound behaves exactly as that one mistake on every case) or none (it
behaves as another pair too). tests/test_check_catalogue.py and tests/test_compound_mistakes.py assert what this
prints; this only counts.

    .venv/bin/python tools/catalogue_report.py
"""

from __future__ import annotations

import contextlib
import io
import os
import pkgutil
import re
import tempfile
import warnings
from pathlib import Path

from tutorial_lib import checks
from tutorial_lib.checks import chapter_exercises
from tutorial_lib.checks.compound import compounds
from tutorial_lib.checks.prediction import PREDICTIONS_ENV, check_as_recorded as check


def main() -> None:
    # A prediction's answers are recorded before their check, as the measuring cell does, in a file of this run's own.
    os.environ[PREDICTIONS_ENV] = str(Path(tempfile.mkdtemp()) / "predictions.json")
    chapters = sorted(m.name[2:] for m in pkgutil.iter_modules(checks.__path__) if re.fullmatch(r"ch\d\d", m.name))
    header = ("chapter", "exercises", "variants", "named right", "mutants", "lost points", "named", "named wrongly",
              "pairs", "both named", "one named", "none named")
    print("  ".join(f"{h:>13}" for h in header))
    totals = [0] * 11
    for chapter in chapters:
        exercises = chapter_exercises(chapter)
        variants = right = mutants = lost = named = pairs = both = one = 0
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for exercise in exercises:
                for mistake in exercise.mistakes:
                    for variant in mistake.variants:
                        variants += 1
                        right += check(exercise.id, variant).candidates == (mistake.name,)
                for mutant in exercise.mutants:
                    result = check(exercise.id, mutant.implementation)
                    mutants += 1
                    lost += result.points == 0
                    named += bool(result.candidates)
                for compound in compounds(exercise.mistakes):
                    result = check(exercise.id, compound.answer)
                    pairs += 1
                    both += result.made_together and set(result.candidates) == {compound.first, compound.second}
                    one += len(result.candidates) == 1
        row = [len(exercises), variants, right, mutants, lost, named, named, pairs, both, one, pairs - both - one]
        totals = [t + r for t, r in zip(totals, row)]
        print("  ".join(f"{v:>13}" for v in [chapter, *row]))
    print("  ".join(f"{v:>13}" for v in ["all", *totals]))


if __name__ == "__main__":
    main()
