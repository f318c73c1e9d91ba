"""Shared set-up of the test suite: where the data lives, a non-interactive plotting backend, fixed seeds."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path

import jaxtyping
import numpy as np
import pytest
import torch

from tutorial_lib.checks import Exercise, check, get_exercise
from tutorial_lib.checks.prediction import PREDICTIONS_ENV, check_as_recorded
from tutorial_lib.checks.tracing import Forbidden

# The corpus is never copied into the repository: it sits in ../shared/data beside the checkout (as in the Makefile).
os.environ.setdefault("TUTORIAL_LIB_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
os.environ.setdefault("MPLBACKEND", "agg")

# The suite's tensors are tiny: one thread beats two, whose start-up and contention on a shared 2-core machine cost
# more than they gain (measured: the core tests take 6 s with one thread, 31 s with two).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, whatever ran before it."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _prediction_records(tmp_path, monkeypatch) -> None:
    """Each test keeps its predictions' records in its own file, never in the folder the suite runs from."""
    monkeypatch.setenv(PREDICTIONS_ENV, str(tmp_path / "predictions.json"))


check_recorded = check_as_recorded  # the tests' name for it


@pytest.fixture
def predict():
    """``predict(exercise_id, learner)``: the check of a prediction recorded before its measurement."""
    return check_recorded


@pytest.fixture
def without_annotation_checks():
    """A context manager that turns jaxtyping's run-time checks off, to test the ``ValueError`` a notebook reader
    sees (notebooks run unchecked) where an annotation would otherwise reject the input first."""

    @contextlib.contextmanager
    def unchecked():
        jaxtyping.config.update("jaxtyping_disable", True)
        try:
            yield
        finally:
            jaxtyping.config.update("jaxtyping_disable", False)

    return unchecked


@pytest.fixture
def annotation_checks_off():
    """jaxtyping's run-time checks off for one test. For the tests that run the checks' catalogue thousands of times
    (tests/test_check_catalogue.py, tests/test_compound_mistakes.py): they test the verdicts, while the annotations of
    the references and of the package they call are checked by the package's own tests and by every reference passing
    its check (tests/test_checks.py). With them, those two files took 565 worker-seconds; without them (and one check per mutant), 302."""
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


@pytest.fixture
def untraced(monkeypatch):
    """Checks that do not trace what an answer calls: for tests of the verdict machinery whose answers are built from
    the package's own implementation (a reference wrapped to return a wrong dtype, say). What the tracing refuses is
    tested on its own (tests/test_call_tracing.py)."""
    monkeypatch.setattr(Exercise, "traced", property(lambda self: Forbidden(())))


@pytest.fixture
def assert_mistake_named():
    """``assert_mistake_named(exercise_id, learner, mistake)``: the check gives ``learner`` no points and names
    ``mistake``, in the catalogue's words (the test every chapter's learner-written mistakes go through)."""

    def assert_named(exercise_id: str, learner, mistake: str) -> None:
        result = check_recorded(exercise_id, learner)
        named = next(m for m in get_exercise(exercise_id).mistakes if m.name == mistake)
        assert not result.passed and result.points == 0, result.verdict
        assert result.mistake == mistake, result.verdict
        assert f"It looks like you {named.description}." in result.verdict

    return assert_named
