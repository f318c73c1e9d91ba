"""check(): every verdict kind, every catalogued mistake named, strict mode, and never raising on a wrong answer.

The learner functions below are written the way a learner would write them, independently of the catalogue's own
implementations in ``tutorial_lib/checks/ch03.py``: a mistake must be recognised by what it does, not how it is spelt.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import pkgutil
import types
import re
import signal
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.attention import causal_mask, padding_mask, scaled_dot_product_attention, sliding_window_mask
from tutorial_lib import checks
from tutorial_lib.checks import Case, Exercise, Mistake, chapter_exercises, check, core, register

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook

CHAPTER_03 = chapter_exercises("03")
# Every chapter's exercises, so a new chNN.py is covered by the catalogue tests below without editing them.
ALL_EXERCISES = [
    exercise
    for module in pkgutil.iter_modules(checks.__path__)
    if re.fullmatch(r"ch\d\d", module.name)
    for exercise in chapter_exercises(module.name[2:])
]


# --- learners' code -------------------------------------------------------------------------------------------------


def attention_like(q, k, v, mask=None, *, scale=None, softmax_dim=-1, fill=float("-inf"), zero_nan=True):
    """A learner's attention; each keyword reproduces one way of getting it wrong."""
    scores = torch.einsum("...qd,...kd->...qk", q, k) / (math.sqrt(q.size(-1)) if scale is None else scale(q, v))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, fill)
    weights = F.softmax(scores, dim=softmax_dim)
    if zero_nan:
        weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.matmul(weights, v), weights


def no_scale(q, k, v, mask=None):
    return attention_like(q, k, v, mask, scale=lambda q, v: 1.0)


def divide_by_d_k(q, k, v, mask=None):
    return attention_like(q, k, v, mask, scale=lambda q, v: q.size(-1))


def scale_by_d_value(q, k, v, mask=None):
    return attention_like(q, k, v, mask, scale=lambda q, v: v.size(-1) ** 0.5)


def k_dot_t(q, k, v, mask=None):
    scores = torch.matmul(q, k.T) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, -1).nan_to_num()
    return weights @ v, weights


def k_transpose_1_2(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = scores.softmax(-1).nan_to_num(0.0)
    return weights @ v, weights


def softmax_dim_1(q, k, v, mask=None):
    return attention_like(q, k, v, mask, softmax_dim=1)


def softmax_over_queries(q, k, v, mask=None):
    return attention_like(q, k, v, mask, softmax_dim=-2)


def inverted_mask(q, k, v, mask=None):
    return attention_like(q, k, v, None if mask is None else mask.logical_not())


def mask_after_softmax(q, k, v, mask=None):
    weights = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights


def masked_with_zero(q, k, v, mask=None):
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.zeros_like(scores))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def masked_with_minus_1e9(q, k, v, mask=None):  # the Annotated Transformer's way
    return attention_like(q, k, v, mask, fill=-1e9)


def nan_rows(q, k, v, mask=None):
    return attention_like(q, k, v, mask, zero_nan=False)


def q_in_place(q, k, v, mask=None):
    q.mul_(q.shape[-1] ** -0.5)
    return attention_like(q, k, v, mask, scale=lambda q, v: 1.0)


def swapped_outputs(q, k, v, mask=None):
    out, weights = attention_like(q, k, v, mask)
    return weights, out


def causal_upper(seq_len):
    return torch.ones(seq_len, seq_len).triu().bool()


def causal_future(seq_len):  # the "True = masked" convention of many tutorials
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)


def causal_next_token(seq_len):
    positions = torch.arange(seq_len)
    return positions[None, :] <= positions[:, None] + 1


def causal_strict(seq_len):
    positions = torch.arange(seq_len)
    return positions[:, None] > positions[None, :]


def causal_float(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len))


def padding_inverted(lengths, seq_len):
    return (torch.arange(seq_len).expand(len(lengths), seq_len) >= lengths.unsqueeze(1)).unsqueeze(1)


def padding_off_by_one(lengths, seq_len):
    return (torch.arange(seq_len).unsqueeze(0) <= lengths.unsqueeze(1)).unsqueeze(1)


def padding_2d(lengths, seq_len):
    return torch.stack([torch.arange(seq_len) < length for length in lengths])


def padding_axis_last(lengths, seq_len):
    return (torch.arange(seq_len)[None] < lengths[:, None]).unsqueeze(-1)


def window_too_wide(seq_len, window):
    query, key = torch.meshgrid(torch.arange(seq_len), torch.arange(seq_len), indexing="ij")
    return (key <= query) & (query - key <= window)


def window_both_sides(seq_len, window):
    query, key = torch.meshgrid(torch.arange(seq_len), torch.arange(seq_len), indexing="ij")
    return (query - key).abs() < window


def window_too_narrow(seq_len, window):
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for t in range(seq_len):
        mask[t, max(0, t - window + 2): t + 1] = True
    return mask


def window_without_self(seq_len, window):
    query, key = torch.meshgrid(torch.arange(seq_len), torch.arange(seq_len), indexing="ij")
    return (query - key >= 1) & (query - key <= window)


def window_first_keys(seq_len, window):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril() & (torch.arange(seq_len) < window)


LEARNER_MISTAKES = [
    ("03.attention", no_scale, "no_scale"),
    ("03.attention", divide_by_d_k, "divided_by_d_k"),
    ("03.attention", scale_by_d_value, "scaled_by_d_value"),
    ("03.attention", k_dot_t, "wrong_k_axes"),
    ("03.attention", k_transpose_1_2, "wrong_k_axes"),
    ("03.attention", softmax_over_queries, "softmax_over_queries"),
    ("03.attention", softmax_dim_1, "softmax_over_queries"),
    ("03.attention", inverted_mask, "inverted_mask"),
    ("03.attention", mask_after_softmax, "mask_after_softmax"),
    ("03.attention", masked_with_zero, "masked_with_zero"),
    ("03.attention", masked_with_minus_1e9, "masked_with_large_negative"),
    ("03.attention", nan_rows, "nan_for_fully_masked_rows"),
    ("03.attention", q_in_place, "scaled_q_in_place"),
    ("03.attention", swapped_outputs, "swapped_outputs"),
    ("03.causal_mask", causal_upper, "upper_triangle"),
    ("03.causal_mask", causal_future, "true_means_masked"),
    ("03.causal_mask", causal_strict, "excluded_diagonal"),
    ("03.causal_mask", causal_next_token, "sees_the_next_token"),
    ("03.causal_mask", causal_float, "not_bool"),
    ("03.padding_mask", padding_inverted, "inverted"),
    ("03.padding_mask", padding_off_by_one, "off_by_one"),
    ("03.padding_mask", padding_2d, "missing_query_axis"),
    ("03.padding_mask", padding_axis_last, "query_axis_last"),
    ("03.sliding_window_mask", window_too_wide, "one_too_wide"),
    ("03.sliding_window_mask", window_both_sides, "not_causal"),
    ("03.sliding_window_mask", window_too_narrow, "one_too_narrow"),
    ("03.sliding_window_mask", window_without_self, "excluded_self"),
    ("03.sliding_window_mask", window_first_keys, "window_from_the_start"),
]

def as_a_learner_wrote_it(obj):
    """The same code, defined outside tutorial_lib (in ``__main__``, as a notebook defines it): a check refuses the
    package's own objects, so the tests that need a correct answer hand over a copy."""
    obj = inspect.unwrap(obj)
    if isinstance(obj, type):
        return type(obj.__name__, (obj,), {"__module__": "__main__", "__qualname__": obj.__qualname__})
    if isinstance(obj, functools.partial):
        return functools.partial(as_a_learner_wrote_it(obj.func), *obj.args, **obj.keywords)
    if not isinstance(obj, types.FunctionType):
        return lambda *args, **kwargs: obj(*args, **kwargs)
    copy = types.FunctionType(obj.__code__, obj.__globals__, obj.__name__, obj.__defaults__, obj.__closure__)
    copy.__kwdefaults__, copy.__module__, copy.__qualname__ = obj.__kwdefaults__, "__main__", obj.__qualname__
    return copy


REFERENCES = {
    "03.attention": as_a_learner_wrote_it(scaled_dot_product_attention),
    "03.causal_mask": lambda seq_len: causal_mask(seq_len),
    "03.padding_mask": as_a_learner_wrote_it(padding_mask),
    "03.sliding_window_mask": lambda seq_len, window: sliding_window_mask(seq_len, window),
}


# --- the cases themselves -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exercise", [e for e in ALL_EXERCISES if e.on_pass is None], ids=lambda exercise: exercise.id)
def test_the_reference_raises_only_where_a_case_asks_for_an_error(exercise):
    """A reference that raised on an ordinary case would make every answer that raises the same "correct": only a
    case whose note announces bad input may raise, and only the ValueError a learner's answer must raise too."""
    from tutorial_lib.checks.core import _ours

    ours = _ours(exercise)
    for index, case in enumerate(ours.cases):
        error = ours.reference(index, case).error
        if error is not None:
            assert isinstance(error, ValueError), f"case {index} ({case.note}): {type(error).__name__}: {error}"
            assert "Error" in case.note or "bad input" in case.note, f"case {index} ({case.note}) raised {error}"


# --- correct answers --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exercise", ALL_EXERCISES, ids=lambda exercise: exercise.id)
@pytest.mark.usefixtures("untraced")
def test_the_reference_passes(exercise, capsys):
    result = check_recorded(exercise.id, as_a_learner_wrote_it(exercise.reference))
    assert result.passed and result.kind == "passed"
    assert result.points == result.max_points > 0
    assert result.mistake is None
    assert "correct" in result.verdict
    # A predict-then-measure exercise speaks of the prediction, not of seeded cases (tutorial_lib.checks.prediction).
    assert ("seeded cases" in result.verdict) == (exercise.on_pass is None)
    # The verdict is the only line, after the line a check that loads a trained model shows while it loads it (the
    # first time in a process: chapter 08's, chapter 09's character GPT).
    *loading, verdict = capsys.readouterr().out.splitlines()
    assert verdict == result.verdict
    assert all("(from the cache, or trained now)" in line for line in loading)


@pytest.mark.parametrize("exercise", ALL_EXERCISES, ids=lambda exercise: exercise.id)
def test_the_reference_itself_is_refused_as_the_librarys_code(exercise):
    result = check_recorded(exercise.id, exercise.reference)
    assert (result.kind, result.points) == ("library_answer", 0)
    assert result.summary.startswith("tutorial_lib's own code, not yours: the answer is ")
    assert "imported rather than written" in result.verdict


def test_a_package_function_is_refused_and_so_is_a_learners_call_of_it():
    result = check("03.causal_mask", causal_mask)
    assert result.summary == "tutorial_lib's own code, not yours: the answer is `causal_mask` from `tutorial_lib.attention`"
    called = check("03.causal_mask", lambda seq_len: causal_mask(seq_len))  # written by the learner, handing it over
    assert (called.kind, called.points) == ("calls_the_work", 0)
    assert called.summary == ("calls code that does the exercise's work: calls `causal_mask` from "
                              "`tutorial_lib.attention`")


@pytest.mark.parametrize("exercise_id", sorted(REFERENCES))
@pytest.mark.usefixtures("untraced")
def test_the_package_functions_pass_chapter_03(exercise_id):
    assert check(exercise_id, REFERENCES[exercise_id]).passed


def test_a_correct_answer_written_differently_passes():
    def mine(q, k, v, mask=None):
        scores = torch.einsum("...qd,...kd->...qk", q / q.shape[-1] ** 0.5, k)
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        weights = scores.softmax(-1)
        weights = weights.masked_fill(weights.isnan(), 0)
        return torch.einsum("...qk,...kd->...qd", weights, v), weights

    assert check("03.attention", mine).passed


def test_chapter_03_declares_its_exercises_and_points():
    # The four pieces here; the build and predict exercises after them are tested in tests/test_checks_ch03.py.
    assert [exercise.id for exercise in CHAPTER_03] == [*REFERENCES, "03.padded_causal_attention", "03.predict_variance"]
    assert [exercise.points for exercise in CHAPTER_03] == [2, 1, 1, 1, 3, 1]
    assert chapter_exercises("99") == []


# --- every catalogued mistake is named --------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize(
    ("exercise_id", "learner", "mistake"), LEARNER_MISTAKES, ids=[learner.__name__ for _, learner, _ in LEARNER_MISTAKES]
)
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    catalogued = {(exercise.id, mistake.name) for exercise in CHAPTER_03 if exercise.id in REFERENCES
                  for mistake in exercise.mistakes}
    assert catalogued == {(exercise_id, mistake) for exercise_id, _, mistake in LEARNER_MISTAKES}


# Every catalogue variant of every chapter is named as itself by tests/test_check_catalogue.py (not repeated here).


# --- each verdict kind ------------------------------------------------------------------------------------------------


def test_not_attempted_yet():
    def stub(q, k, v, mask=None):
        raise NotImplementedError("write your solution here")

    result = check("03.attention", stub)
    assert result.kind == "not_attempted" and result.points == 0
    assert result.verdict.startswith("03.attention: not attempted yet (0/2 points).")


@pytest.mark.usefixtures("untraced")
def test_an_exception_is_reported_with_the_line_that_raised_it():
    def four_axes_only(q, k, v, mask=None):
        d_k = q.shape[3]
        return scaled_dot_product_attention(q / math.sqrt(d_k), k, v, mask)

    result = check("03.attention", four_axes_only)
    assert result.kind == "raised" and result.mistake is None
    line = four_axes_only.__code__.co_firstlineno + 1
    assert result.summary == f"raised IndexError: tuple index out of range (line {line} of your code: `d_k = q.shape[3]`)"
    assert f"raised IndexError: tuple index out of range (line {line} of your code: `d_k = q.shape[3]`)" in result.verdict


@pytest.mark.usefixtures("untraced")
def test_a_learner_raising_not_implemented_later_is_an_exception_not_a_stub():
    def no_masks(q, k, v, mask=None):
        if mask is not None:
            raise NotImplementedError("masks later")
        return scaled_dot_product_attention(q, k, v)

    result = check("03.attention", no_masks)
    assert result.kind == "raised" and "NotImplementedError: masks later" in result.verdict


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, mask)[0], "should return a tuple (out, weights), got a tensor"),
        (lambda q, k, v, mask=None: None, "should return a tuple (out, weights), got None"),
        (lambda q, k, v, mask=None: (1.0, 2.0), "out should be a tensor, got a value of type float"),
        (lambda q, k, v, mask=None: tuple(t.float() for t in scaled_dot_product_attention(q, k, v, mask)), "has dtype torch.float32 but should have torch.float64"),
    ],
)
@pytest.mark.usefixtures("untraced")
def test_wrong_type(answer, expected):
    result = check("03.attention", answer)
    assert result.kind == "wrong_type" and expected in result.verdict, result.verdict


def test_a_result_on_another_device_is_the_wrong_type():
    result = check("03.causal_mask", lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool, device="meta"))
    assert result.kind == "wrong_type" and "the mask is on meta but should be on cpu" in result.verdict


def test_something_that_is_not_a_function():
    result = check("03.attention", 42)
    assert result.kind == "wrong_type" and "got a value of type int" in result.verdict


@pytest.mark.usefixtures("untraced")
def test_wrong_shape_says_expected_and_got():
    def extra_axis(q, k, v, mask=None):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return out, weights.unsqueeze(0)

    result = check("03.attention", extra_axis)
    assert result.kind == "wrong_shape"
    assert "weights has shape (1, 4, 4, 4) but should have (4, 4, 4)" in result.verdict


@pytest.mark.usefixtures("untraced")
def test_nan_without_a_known_mistake_gets_the_generic_hint():
    def nan_everywhere(q, k, v, mask=None):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return out * float("nan"), weights

    result = check("03.attention", nan_everywhere)
    assert result.kind == "nan" and result.mistake is None
    assert "out is NaN at every entry where the reference is not: at [0, 0, :] expected [" in result.verdict
    assert "got [nan, nan, nan, nan]. NaN comes from 0/0" in result.verdict


@pytest.mark.usefixtures("untraced")
def test_mutating_an_input_is_reported_with_its_name():
    def zeroes_v(q, k, v, mask=None):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        v.zero_()
        return out, weights

    result = check("03.attention", zeroes_v)
    assert result.kind == "mutated_input" and result.mistake is None
    assert "the call changed v" in result.verdict


@pytest.mark.usefixtures("untraced")
def test_wrong_values_without_a_known_mistake_are_described_and_point_to_the_folded_hints():
    def off_by_one(q, k, v, mask=None):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return out + 1, weights

    result = check("03.attention", off_by_one)
    assert result.kind == "wrong_values" and result.mistake is None
    assert "out differs from the reference at every entry by up to 1: at [0, 0, :] expected [" in result.verdict
    assert result.summary == "wrong values: out differs from the reference at every entry by up to 1"
    assert "matches none of the known mistakes. The hints folded under the exercise in its notebook" in result.verdict
    assert "Eq. (1)" not in result.verdict and "softmax" not in result.verdict  # nothing of the answer's formula


def test_a_hang_is_stopped_by_the_time_limit():
    def hangs(q, k, v, mask=None):
        while True:
            pass

    result = check("03.attention", hangs, time_limit=0.2)
    assert result.kind == "too_slow" and "did not finish within 0.2 s" in result.verdict


def test_a_hang_off_the_main_thread_is_abandoned_after_the_time_limit():
    release = threading.Event()

    def hangs_until_released(q, k, v, mask=None):
        while not release.is_set():
            pass

    results = []
    worker = threading.Thread(target=lambda: results.append(check("03.attention", hangs_until_released, time_limit=0.2)))
    worker.start()
    worker.join(30)
    release.set()  # end the abandoned call, which no alarm can stop off the main thread
    assert results and results[0].kind == "too_slow"


def test_the_alarm_of_someone_else_survives_a_check():
    def handler(signum, frame):
        raise AssertionError("the outer alarm fired")

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        check("03.causal_mask", REFERENCES["03.causal_mask"])
        assert signal.getsignal(signal.SIGALRM) is handler
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_bug_of_the_check_itself_becomes_a_verdict(monkeypatch):
    def broken_judge(exercise, obj, time_limit):
        raise RuntimeError("internal")

    monkeypatch.setattr(core, "_judge", broken_judge)
    result = check("03.attention", scaled_dot_product_attention)
    assert result.kind == "check_failed" and "RuntimeError: internal" in result.verdict


@pytest.mark.parametrize(
    "answer",
    [
        lambda q, k, v, mask=None: {}["missing"],
        lambda q, k, v, mask=None: sys.exit(3),
        lambda q, k, v, mask=None: (q.new_full(q.shape, float("nan")), None),
        lambda q, k, v, mask=None: q.add_(1),
        lambda q, k, v, mask=None: "attention",
    ],
    ids=["KeyError", "SystemExit", "NaN", "mutates", "a string"],
)
def test_never_raises_on_a_wrong_answer(answer):
    result = check("03.attention", answer)
    assert not result.passed and result.points == 0


def test_verdicts_are_one_plain_paragraph_and_deterministic(capsys):
    first = check("03.attention", divide_by_d_k)
    second = check("03.attention", divide_by_d_k)
    assert first == second
    assert "\n" not in first.verdict and "\x1b" not in first.verdict
    assert capsys.readouterr().out.count("\n") == 2


# --- strict mode, the grading log, usage errors -----------------------------------------------------------------------


def test_strict_mode_raises_on_a_wrong_answer_only():
    with pytest.raises(AssertionError, match="divided the scores by d_k"):
        check("03.attention", divide_by_d_k, strict=True)
    assert check("03.attention", as_a_learner_wrote_it(scaled_dot_product_attention), strict=True).passed

    def stub(q, k, v, mask=None):
        raise NotImplementedError

    assert check("03.attention", stub, strict=True).kind == "not_attempted"


def test_strict_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv(core.STRICT_ENV, "1")
    with pytest.raises(AssertionError):
        check("03.causal_mask", causal_float)
    assert check("03.causal_mask", causal_float, strict=False).kind == "wrong_type"


def test_results_are_logged_as_json_lines(tmp_path, monkeypatch):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(core.LOG_ENV, str(log))
    check("03.causal_mask", causal_strict)
    with core.graded_cell("s3cret"):
        check("03.padding_mask", as_a_learner_wrote_it(padding_mask))
    first, second = (json.loads(line) for line in log.read_text().splitlines())
    assert "cell_secret" not in first and second["cell_secret"] == "s3cret"  # only the grader's cells carry it
    assert first["exercise_id"] == "03.causal_mask" and first["points"] == 0 and first["max_points"] == 1
    assert first["mistake"] == "excluded_diagonal" and first["passed"] is False
    assert first["summary"] == "wrong values: left out the diagonal"
    assert second["passed"] is True and second["points"] == 1


@pytest.mark.parametrize("exercise_id", ["03.no_such_exercise", "3.attention", "attention", "99.attention"])
def test_an_unknown_exercise_is_the_authors_error(exercise_id):
    with pytest.raises(ValueError, match="exercise_id"):
        check(exercise_id, scaled_dot_product_attention)


@pytest.mark.parametrize("time_limit", [0, -1.0, True])
def test_the_time_limit_must_be_positive(time_limit):
    with pytest.raises(ValueError, match="time_limit"):
        check("03.attention", scaled_dot_product_attention, time_limit=time_limit)


def test_declarations_are_validated():
    def cases(generator):
        return [Case.of(x=torch.zeros(2))]

    with pytest.raises(ValueError, match="Exercise id"):
        Exercise("attention", abs, cases, points=1, checked="")
    with pytest.raises(ValueError, match="points"):
        Exercise("98.x", abs, cases, points=0, checked="")
    with pytest.raises(ValueError, match="variants"):
        Mistake("m", "did m", "fix", ())
    twice = (Mistake("m", "did m", "fix", (abs,)),) * 2
    with pytest.raises(ValueError, match="unique"):
        Exercise("98.x", abs, cases, points=1, checked="", mistakes=twice)
    with pytest.raises(ValueError, match="registered twice"):
        register(CHAPTER_03[0])


def test_case_descriptions_name_shapes_dtypes_and_values():
    case = Case.of(q=torch.zeros(2, 5, 8, dtype=torch.float64), mask=torch.ones(5, 5, dtype=torch.bool),
                   lengths=torch.tensor([3, 1]), seq_len=5, note="a note")
    assert case.describe() == "q (2, 5, 8) float64, mask (5, 5), lengths=[3, 1], seq_len=5 (a note)"


# --- the core beyond chapter 03: class exercises and custom tolerances ------------------------------------------------


class Scale(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class AddInstead(Scale):
    def forward(self, x):
        return x + self.factor


register(Exercise(
    "98.scale", Scale, lambda generator: [Case.of(x=torch.randn(5, generator=generator))], points=1,
    checked="one vector", call=lambda cls, args: cls(2.0)(*args), tolerance=(0.0, 1e-2),
    mistakes=(Mistake("added", "added the factor", "Multiply by it.", (AddInstead,)),),
))


def test_a_class_exercise_builds_the_learners_module_the_way_it_declares():
    class Mine(torch.nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor + 1e-3  # within the exercise's atol of 1e-2, far outside float32's default

        def forward(self, x):
            return self.factor * x

    class Stub(torch.nn.Module):
        def __init__(self, factor):
            raise NotImplementedError

    class Adds(torch.nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def forward(self, x):
            return self.factor + x

    assert check("98.scale", Mine).passed
    assert check("98.scale", Stub).kind == "not_attempted"
    assert check("98.scale", Adds).mistake == "added"


# --- honest blame, infinities, candidates (issue 9) ------------------------------------------------------------------


register(Exercise(
    "98.shape_of", lambda x: x * 2, lambda generator: [Case.of(x=torch.ones(3))], points=1,
    checked="one vector", call=lambda fn, args: fn(*args).shape, outputs=("the shape",),
))


def test_a_wrapper_failing_on_a_malformed_output_is_not_blamed_on_the_learner():
    result = check("98.shape_of", lambda x: "not a tensor")
    assert result.kind == "wrong_type" and "your code raised" not in result.verdict
    assert "what your code returned (a value of type str) could not be used: AttributeError" in result.verdict


def test_a_malformed_sample_is_a_wrong_shape_not_an_exception():
    def sample(logits, temperature, generator):
        probs = torch.softmax(logits / max(temperature, 1e-6), dim=-1)
        return torch.multinomial(probs, 1, generator=generator)  # forgot .squeeze(-1)

    result = check("10.sample", sample)
    assert result.kind == "wrong_shape" and "raised" not in result.verdict
    assert "should return one token id per row, shape (batch,) = (40000,), got (40000, 1)" in result.verdict


def test_a_learner_that_raises_inside_the_wrapper_is_still_blamed():
    def schedule(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
        return [max_lr][step]

    result = check("09.warmup_cosine_lr", schedule)
    assert result.kind == "raised" and "your code raised IndexError" in result.verdict
    assert "of your code: `return [max_lr][step]`" in result.verdict


def test_a_number_expected_and_none_returned_is_a_wrong_type():
    result = check("09.warmup_cosine_lr", lambda step, **kwargs: None)
    assert result.kind == "wrong_type" and "should return a number (a Python float), got NoneType" in result.verdict


def test_a_finite_value_where_minus_inf_belongs_is_described_as_such():
    def top_k(logits, top_k):
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        return logits.masked_fill(logits < kth, -1e9)

    result = check("10.top_k", top_k)
    assert result.kind == "wrong_values" and result.mistake is None
    assert "should be -inf at 21 of 30 entries" in result.verdict and "but is finite there" in result.verdict
    assert "got [" in result.verdict and "-1e+09" in result.verdict and "3.4e+38" not in result.verdict


@pytest.mark.usefixtures("untraced")
def test_an_overflow_gets_its_hint():
    def attention(q, k, v, mask=None):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return out * torch.tensor(1e30, dtype=out.dtype) ** 2, weights  # inf in float32

    result = check("03.attention", attention)
    assert result.kind == "inf" and "out is infinite at" in result.verdict
    assert "That is an overflow" in result.verdict and "Subtract the maximum" in result.verdict


def test_two_mistakes_that_match_on_every_case_are_named_as_candidates():
    exercise = core.get_exercise("03.causal_mask")
    twin = Mistake("upper_triangle_twin", "built the upper triangle twice over", "Use torch.tril.",
                   exercise.mistakes[0].variants)
    object.__setattr__(exercise, "mistakes", exercise.mistakes + (twin,))
    try:
        result = check("03.causal_mask", exercise.mistakes[0].variants[0])
    finally:
        object.__setattr__(exercise, "mistakes", exercise.mistakes[:-1])
    assert result.mistake is None and result.candidates == ("upper_triangle", "upper_triangle_twin")
    assert "behaves like 2 known mistakes at once: you built the upper triangle instead of the lower one, or you" in result.verdict
