"""Chapter 05's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.checks import check, get_exercise
from tutorial_lib.feed_forward import FeedForward, SwiGLU

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook


def ffn_right(x, w1, b1, w2, b2, activation="relu", dropout=0.0, training=False, generator=None):
    hidden = torch.addmm(b1, x.reshape(-1, x.shape[-1]), w1).reshape(*x.shape[:-1], -1)
    hidden = hidden.clamp(min=0) if activation == "relu" else 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))
    if training:
        keep = torch.rand(hidden.shape, generator=generator, dtype=hidden.dtype) >= dropout
        hidden = torch.where(keep, hidden / (1 - dropout), torch.zeros_like(hidden))
    return hidden @ w2 + b2


def ffn_like(**wrong):
    def feed_forward(x, w1, b1, w2, b2, activation="relu", dropout=0.0, training=False, generator=None):
        act = F.relu if activation == "relu" or wrong.get("always_relu") else (
            (lambda z: F.gelu(z, approximate="tanh")) if wrong.get("tanh") else F.gelu)
        h = x @ w1 + b1
        if not wrong.get("act_late"):
            h = act(h)
        if dropout and (training or wrong.get("eval_dropout")):
            u = torch.rand(h.shape, generator=generator, dtype=h.dtype)
            h = h * (u >= dropout) if wrong.get("no_rescale") else h * (u >= dropout) / (1.0 - dropout)
        y = h @ w2 + b2
        return act(y) if wrong.get("act_late") else y

    return feed_forward


def gelu_right(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def gelu_like(**wrong):
    def gelu(x):
        inner = (2 / math.pi if wrong.get("no_root") else math.sqrt(2 / math.pi)) * (
            x + 0.044715 * (x * x if wrong.get("square") else x * x * x))
        return (1.0 if wrong.get("no_half") else 0.5) * x * (1 + torch.tanh(inner))

    return gelu


def swiglu_right(x, w_gate, w_up, w_down):
    a = x @ w_gate
    return (a * torch.sigmoid(a) * (x @ w_up)) @ w_down


def swiglu_like(**wrong):
    def swiglu(x, w_gate, w_up, w_down):
        g, u = (x @ w_up, x @ w_gate) if wrong.get("swap") else (x @ w_gate, x @ w_up)
        act = wrong.get("act", F.silu)
        if wrong.get("after"):
            return act(g * u) @ w_down
        return ((act(g) + u) if wrong.get("add") else act(g) * u) @ w_down

    return swiglu


def size_right(d_model, multiple_of):
    hidden = 8 * d_model // 3
    return -(-hidden // multiple_of) * multiple_of


LEARNER_MISTAKES = [
    ("05.feed_forward", ffn_like(act_late=True), "activation_after_second_linear"),
    ("05.feed_forward", ffn_like(tanh=True), "tanh_gelu_for_exact"),
    ("05.feed_forward", ffn_like(always_relu=True), "ignored_activation"),
    ("05.feed_forward", ffn_like(eval_dropout=True), "dropout_at_evaluation"),
    ("05.feed_forward", ffn_like(no_rescale=True), "dropout_not_rescaled"),
    ("05.gelu_tanh", lambda x: x * 0.5 * (1 + torch.special.erf(x / 2**0.5)), "exact_gelu"),
    ("05.gelu_tanh", gelu_like(no_half=True), "missing_half"),
    ("05.gelu_tanh", gelu_like(square=True), "square_instead_of_cube"),
    ("05.gelu_tanh", gelu_like(no_root=True), "no_square_root"),
    ("05.gelu_tanh", lambda x: x / (1 + torch.exp(-1.702 * x)), "sigmoid_approximation"),
    ("05.swiglu", swiglu_like(swap=True), "gate_on_wrong_branch"),
    ("05.swiglu", swiglu_like(act=torch.sigmoid), "sigmoid_gate"),
    ("05.swiglu", swiglu_like(act=F.relu), "relu_gate"),
    ("05.swiglu", swiglu_like(after=True), "activation_after_product"),
    ("05.swiglu", swiglu_like(add=True), "added_branches"),
    ("05.swiglu_hidden_size", lambda d, m: -(-4 * d // m) * m, "kept_four_d_model"),
    ("05.swiglu_hidden_size", lambda d, m: -(-(2 * d // 3) // m) * m, "two_thirds_of_d_model"),
    ("05.swiglu_hidden_size", lambda d, m: (8 * d // 3) // m * m, "rounded_down"),
    ("05.swiglu_hidden_size", lambda d, m: round(8 * d / 3 / m) * m, "rounded_to_nearest"),
    ("05.swiglu_hidden_size", lambda d, m: 8 * d // 3, "not_rounded"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}" for e, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    exercises = ("05.feed_forward", "05.gelu_tanh", "05.swiglu", "05.swiglu_hidden_size")
    catalogued = {(e, m.name) for e in exercises for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("05.feed_forward", ffn_right), ("05.feed_forward", ffn_like()), ("05.gelu_tanh", gelu_right),
    ("05.gelu_tanh", gelu_like()), ("05.swiglu", swiglu_right), ("05.swiglu_hidden_size", size_right),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    assert check_recorded(exercise_id, answer).passed


def test_the_references_are_the_package_modules_with_their_weights():
    from tutorial_lib.checks.ch05 import reference_feed_forward, reference_swiglu, reference_swiglu_hidden_size

    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    ffn = FeedForward(16, 64, activation="gelu").eval()
    expected = ffn(x)
    got = reference_feed_forward(x, ffn.up.weight.T, ffn.up.bias, ffn.down.weight.T, ffn.down.bias, "gelu")
    torch.testing.assert_close(got, expected)
    swiglu = SwiGLU(16, reference_swiglu_hidden_size(16, 1))
    assert swiglu.gate.out_features == 42
    got = reference_swiglu(x, swiglu.gate.weight.T, swiglu.up.weight.T, swiglu.down.weight.T)
    torch.testing.assert_close(got, swiglu(x))
    assert reference_swiglu_hidden_size(4096, 256) == 11008 and reference_swiglu_hidden_size(5120, 256) == 13824


# --- the build exercise (05.ffn) and the prediction (05.predict_ffn_share) ----------------------------------------------


class FfnThreeKinds(torch.nn.Module):
    wrong = None

    def __init__(self, d_model, d_ff, kind, *, bias=None, dropout=0.0, multiple_of=None):
        super().__init__()
        wrong = self.wrong
        if kind not in ("relu", "gelu_tanh", "swiglu"):
            raise ValueError(f"unknown kind {kind}")
        if wrong != "zero size" and min(d_model, d_ff) <= 0:
            raise ValueError("d_model and d_ff must be positive")
        if wrong != "dropout one" and (dropout < 0 or dropout >= 1):
            raise ValueError(f"dropout {dropout} is not a probability below 1")
        if multiple_of:
            if kind != "swiglu" and wrong != "multiple_of anywhere":
                raise ValueError("multiple_of: swiglu only")
            if kind == "swiglu" and wrong != "no rounding":
                base = d_ff if wrong == "round d_ff" else (2 * d_ff) // 3
                d_ff = base // multiple_of * multiple_of if wrong == "floor" else math.ceil(base / multiple_of) * multiple_of
        self.kind, self.rate = kind, dropout
        if bias is None or wrong == "family bias":
            bias = kind != "swiglu"
        self.up = torch.nn.Linear(d_model, d_ff, bias=bias)
        self.down = torch.nn.Linear(d_ff, d_model, bias=bias)
        if kind == "swiglu":
            self.gate = torch.nn.Linear(d_model, d_ff, bias=bias)

    def forward(self, x):
        wrong = self.wrong
        hidden = self.up(x)
        if self.kind == "relu":
            hidden = hidden.clamp(min=0)
        elif self.kind == "gelu_tanh":
            hidden = 0.5 * hidden * (1 + torch.tanh((2 / math.pi) ** 0.5 * (hidden + 0.044715 * hidden**3)))
        else:
            gate = self.gate(x)
            hidden = gate * torch.sigmoid(gate) * hidden
        if wrong == "drop late":
            return F.dropout(self.down(hidden), self.rate, self.training)
        return self.down(F.dropout(hidden, self.rate, training=self.training or wrong == "always drop"))


def ffn_three_kinds(wrong):
    return type(f"Ffn_{wrong.replace(' ', '_')}", (FfnThreeKinds,), {"wrong": wrong})


class FfnUpAsGate(FfnThreeKinds):
    def forward(self, x):
        if self.kind == "swiglu":
            return self.down(F.dropout(F.silu(self.up(x)) * self.gate(x), self.rate, self.training))
        return super().forward(x)


class FfnErfGelu(FfnThreeKinds):
    def forward(self, x):
        if self.kind == "gelu_tanh":
            h = self.up(x)
            return self.down(F.dropout(h * 0.5 * (1 + torch.erf(h / math.sqrt(2))), self.rate, self.training))
        return super().forward(x)


class FfnGlu(FfnThreeKinds):
    def forward(self, x):
        if self.kind == "swiglu":
            return self.down(F.dropout(torch.sigmoid(self.gate(x)) * self.up(x), self.rate, self.training))
        return super().forward(x)


class FfnActAtTheEnd(FfnThreeKinds):
    def forward(self, x):
        if self.kind == "relu":
            return torch.relu(self.down(F.dropout(self.up(x), self.rate, self.training)))
        if self.kind == "gelu_tanh":
            return F.gelu(self.down(F.dropout(self.up(x), self.rate, self.training)), approximate="tanh")
        return super().forward(x)


FFN_MISTAKES = [(FfnErfGelu, "exact_gelu"), (FfnUpAsGate, "gate_and_up_swapped"), (FfnGlu, "sigmoid_gate"),
                (FfnActAtTheEnd, "activation_on_the_output"), (ffn_three_kinds("family bias"), "bias_ignored"),
                (ffn_three_kinds("no rounding"), "multiple_of_ignored"), (ffn_three_kinds("floor"), "rounded_down"),
                (ffn_three_kinds("round d_ff"), "two_thirds_skipped"),
                (ffn_three_kinds("drop late"), "dropout_on_the_output"),
                (ffn_three_kinds("always drop"), "dropout_at_evaluation"),
                (ffn_three_kinds("zero size"), "size_not_refused"),
                (ffn_three_kinds("dropout one"), "dropout_not_refused"),
                (ffn_three_kinds("multiple_of anywhere"), "multiple_of_not_refused")]


def test_the_build_exercise_passes_an_ffn_written_differently():
    result = check("05.ffn", FfnThreeKinds)
    assert result.passed, result.verdict


@pytest.mark.parametrize(("learner", "mistake"), FFN_MISTAKES, ids=[m for _, m in FFN_MISTAKES])
def test_a_learners_ffn_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("05.ffn", learner, mistake)


def test_every_catalogued_ffn_mistake_has_a_learner_version_here():
    assert {m.name for m in get_exercise("05.ffn").mistakes} == {m for _, m in FFN_MISTAKES}


def test_an_ffn_that_never_drops_loses_its_points():
    class NoDropout(FfnThreeKinds):
        def forward(self, x):
            rate, self.rate = self.rate, 0.0
            try:
                return super().forward(x)
            finally:
                self.rate = rate

    result = check("05.ffn", NoDropout)
    assert not result.passed and "training=True" in result.verdict


def test_the_package_modules_inside_the_learners_score_nothing():
    from tutorial_lib.feed_forward import FeedForward

    class Wrapped(FfnThreeKinds):
        def forward(self, x):
            inner = FeedForward(self.up.in_features, self.up.out_features, activation=self.kind)
            inner.load_state_dict({name: t for name, t in self.state_dict().items()})
            return inner(x)

    assert check("05.ffn", Wrapped).kind == "calls_the_work"


def test_the_ffn_reference_is_torchs_own_functions_and_llamas_sizes():
    """Each kind against torch's F.relu, F.gelu(approximate="tanh") and F.silu on the module's own weights; with
    ``bias``, dropout in training (torch's F.dropout, same seed) and ``multiple_of`` (LLaMA-7B's and -13B's published
    sizes, 11008 and 13824, and the package's llama_d_ff); bad arguments refused, naming them."""
    from tutorial_lib.checks.ch05 import reference_feed_forward_module, rounded_hidden_size
    from tutorial_lib.models.llama import llama_d_ff

    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    for kind, act in (("relu", F.relu), ("gelu_tanh", lambda h: F.gelu(h, approximate="tanh"))):
        for bias in (None, False):
            ffn = reference_feed_forward_module(16, 40, kind, bias=bias).eval()
            up, down = ffn.up, ffn.down
            assert (up.bias is None) == (bias is False) and (down.bias is None) == (bias is False)
            torch.testing.assert_close(ffn(x), F.linear(act(F.linear(x, up.weight, up.bias)), down.weight, down.bias))
    ffn = reference_feed_forward_module(16, 40, "gelu_tanh", dropout=0.5).train()
    torch.manual_seed(1)
    got = ffn(x)
    torch.manual_seed(1)
    hidden = F.dropout(F.gelu(F.linear(x, ffn.up.weight, ffn.up.bias), approximate="tanh"), 0.5, training=True)
    torch.testing.assert_close(got, F.linear(hidden, ffn.down.weight, ffn.down.bias))
    for bias in (None, True):
        swiglu = reference_feed_forward_module(16, 64, "swiglu", bias=bias, multiple_of=16).eval()
        assert swiglu.gate.out_features == 48 and (swiglu.up.bias is not None) == bool(bias)
        gate, up, down = swiglu.gate, swiglu.up, swiglu.down
        expected = F.linear(F.silu(F.linear(x, gate.weight, gate.bias)) * F.linear(x, up.weight, up.bias), down.weight,
                            down.bias)
        torch.testing.assert_close(swiglu(x), expected)
    assert rounded_hidden_size(4 * 4096, 256) == 11008 and rounded_hidden_size(4 * 5120, 256) == 13824
    assert all(rounded_hidden_size(4 * d, m) == llama_d_ff(d, m) for d in range(1, 200, 7) for m in (1, 8, 32, 256))
    for arguments, name in (((16, 40, "gelu"), "kind"), ((0, 40, "relu"), "d_model"), ((16, -4, "relu"), "d_ff"),
                            ((16, 40, "relu", {"dropout": 1.0}), "dropout"),
                            ((16, 40, "swiglu", {"multiple_of": 0}), "multiple_of"),
                            ((16, 40, "relu", {"multiple_of": 8}), "multiple_of")):
        *positional, options = arguments if isinstance(arguments[-1], dict) else (*arguments, {})
        with pytest.raises(ValueError, match=name):
            reference_feed_forward_module(*positional, **options)


def test_the_share_prediction_names_equal_halves(predict):
    assert predict("05.predict_ffn_share", lambda: 2 / 3).passed
    assert predict("05.predict_ffn_share", lambda: 0.5).mistake == "as_large_as_attention"


# --- the measured prediction (05.predict_dead_share) ------------------------------------------------------------------


def test_the_dead_share_is_measured_on_the_relu_output_and_stays_near_half():
    from tutorial_lib.checks.ch05 import dead_share, ffn_hidden_units

    hidden = ffn_hidden_units()
    assert hidden.shape == (512, 256) and hidden.min() == 0  # after the ReLU
    assert 0.4 < dead_share() < 0.55
    # the shift sorts the units: some are off for every input, about as many on for every input
    always_off, always_on = (hidden == 0).all(0).sum().item(), (hidden > 0).all(0).sum().item()
    assert always_off > 10 and always_on > 10


def test_the_dead_share_prediction_names_each_wrong_picture(predict):
    assert predict("05.predict_dead_share", lambda: 0.5).passed
    assert predict("05.predict_dead_share", lambda: 0).mistake == "positive_inputs_pass"
    assert predict("05.predict_dead_share", lambda: 0.0013).mistake == "share_of_negative_inputs"
    assert predict("05.predict_dead_share", lambda: 0.75).mistake == "shift_only_switches_off"
    assert predict("05.predict_dead_share", lambda: 0.25).mistake == "shift_only_switches_on"
