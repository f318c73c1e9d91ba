"""Two catalogued mistakes made at once, generated from the catalogue's own builders.

Most catalogues write their mistakes with a builder whose keywords each reproduce one way of getting the exercise wrong
(``_layer_norm_like(unbiased=True)``, ``_layer_norm_like(affine=False)``). Decorated with :func:`mistake_builder`, the
builder marks every answer it makes with its recipe (the builder and the keywords), so two mistakes made with the same
builder and different keywords can be made *together*: ``_layer_norm_like(unbiased=True, affine=False)``. The check
runs these compounds when a wrong answer matches no single mistake, and names both mistakes when exactly one compound
behaves like the answer on every case (tutorial_lib.checks.core); tests/test_compound_mistakes.py checks every pair of
every exercise, and ``tools/catalogue_report.py`` counts them.

Two mistakes cannot be made together when they set the same keyword (a variance both biased and unbiased), or when
they come from different builders; a compound that the catalogue already holds as one mistake (the popular tutorial's
LayerNorm is the unbiased variance *and* ε outside the root) is that mistake.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_RECIPE = "__mistake_recipe__"


@dataclass(frozen=True)
class Recipe:
    """How a catalogued variant was made: ``make(**dict(flags))``."""

    make: Callable[..., Any]
    flags: tuple[tuple[str, Any], ...]

    def with_flags(self, other: Recipe) -> Recipe | None:
        """Both recipes' keywords in one answer, or None when they cannot be applied together."""
        mine, theirs = dict(self.flags), dict(other.flags)
        if other.make is not self.make or not mine or not theirs or set(mine) & set(theirs):
            return None
        return Recipe(self.make, tuple(sorted({**mine, **theirs}.items())))

    def build(self) -> Any:
        return _mark(self.make(**dict(self.flags)), self)


def _mark(answer: Any, recipe: Recipe) -> Any:
    try:
        setattr(answer, _RECIPE, recipe)
    except (AttributeError, TypeError):  # an object that takes no attributes: it cannot be composed, nothing more
        pass
    return answer


def mistake_builder(make: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a catalogue's builder (keyword-only flags, each one mistake): the answers it makes can be composed."""

    @functools.wraps(make)
    def build(**flags: Any) -> Any:
        return _mark(make(**flags), Recipe(make, tuple(sorted(flags.items()))))

    return build


def recipe_of(variant: Any) -> Recipe | None:
    return getattr(variant, _RECIPE, None)


@dataclass(frozen=True)
class Compound:
    """Two catalogued mistakes made together: their names (in catalogue order) and the answer that makes both."""

    first: str
    second: str
    answer: Any
    recipe: Recipe


def _same_flags(a: Recipe, b: Recipe) -> bool:
    return a.make is b.make and a.flags == b.flags


def compounds(mistakes: tuple[Any, ...]) -> Iterator[Compound]:
    """Every pair of ``mistakes`` (catalogue :class:`~tutorial_lib.checks.core.Mistake` entries) that can be made
    together, one compound per pair of their variants' recipes; a compound the catalogue holds as a single mistake is
    left out (it is that mistake, and the catalogue's tests name it)."""
    catalogued = [recipe for mistake in mistakes for recipe in map(recipe_of, mistake.variants) if recipe is not None]
    for first, second in itertools.combinations(mistakes, 2):
        for a, b in itertools.product(map(recipe_of, first.variants), map(recipe_of, second.variants)):
            joint = a.with_flags(b) if a is not None and b is not None else None
            if joint is not None and not any(_same_flags(joint, known) for known in catalogued):
                yield Compound(first.name, second.name, joint.build(), joint)
