"""Answers that hand the exercise's work to the package or to torch score 0, by what they call (checks/tracing.py).

Each bypass is written as a learner who wants the points would write it: a wrapper, an alias, a helper, a module,
the model's own forward, an exception swallowed. What the exercises allow (torch.softmax, the blocks of the model a
case hands over, the learner's own helpers) still passes, and a call made by the check's own wrapper never counts.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DistributedSampler

from tutorial_lib.attention import scaled_dot_product_attention as package_attention
from tutorial_lib.checks import chapter_exercises, check
from tutorial_lib.checks.tracing import CallTrace, Forbidden, callee_codes, describe_callee
from tutorial_lib.models.gpt import GPT, GPTConfig

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook


def refused(exercise_id: str, answer, callee: str) -> None:
    result = check_recorded(exercise_id, answer)
    assert (result.kind, result.points) == ("calls_the_work", 0), result.verdict
    assert f"Your answer calls {callee}, which does what this exercise asks you to build." in result.verdict
    assert result.summary == f"calls code that does the exercise's work: calls {callee}"


def own_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


# --- the bypasses of issue 31, each refused -------------------------------------------------------------------------


def test_the_models_own_forward_is_refused_for_the_forward_pass():
    class BooksGPTInside(nn.Module):  # the learner's GPT, made of the package's
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind="gelu_tanh"):
            super().__init__()
            self.inner = GPT(GPTConfig(d_vocab=d_vocab, n_ctx=n_ctx, d_model=d_model, n_heads=n_heads,
                                       n_layers=n_layers, d_ff=d_ff, activation=kind))

        def forward(self, tokens):
            return self.inner(tokens)

    assert check_recorded("08.gpt_module", BooksGPTInside).kind == "calls_the_work"
    refused("10.cached_forward", lambda model, tokens, cache: model(tokens, cache=cache),
            "`GPT.forward` from `tutorial_lib.models.gpt`")


def test_a_wrapper_an_alias_or_a_helper_around_the_packages_attention_is_refused():
    def wrapper(q, k, v, mask=None):
        return package_attention(q, k, v, mask)

    def helper(q, k, v, mask):
        return package_attention(q, k, v, mask)

    def through_a_helper(q, k, v, mask=None):
        return helper(q, k, v, mask)

    for answer in (wrapper, through_a_helper):
        refused("03.attention", answer, "`scaled_dot_product_attention` from `tutorial_lib.attention`")


def test_torchs_fused_attention_is_refused():
    def fused(q, k, v, mask=None):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out, own_attention(q, k, v, mask)[1]

    refused("03.attention", fused, "torch's `F.scaled_dot_product_attention`")


def test_torchs_layer_norm_is_refused_as_a_function_a_builtin_or_a_module():
    def functional(x, weight, bias, eps):
        return F.layer_norm(x, weight.shape, weight, bias, eps)

    def builtin(x, weight, bias, eps):
        return torch.layer_norm(x, weight.shape, weight, bias, eps)

    def module(x, weight, bias, eps):
        norm = nn.LayerNorm(weight.shape, eps=eps, dtype=x.dtype)
        with torch.no_grad():
            norm.weight.copy_(weight)
            norm.bias.copy_(bias)
        return norm(x)

    refused("06.layer_norm", functional, "torch's `F.layer_norm`")
    refused("06.layer_norm", builtin, "torch's `torch.layer_norm`")
    refused("06.layer_norm", module, "torch's `nn.LayerNorm`")


def test_a_call_whose_result_is_thrown_away_still_counts():
    def sneaky(q, k, v, mask=None):
        try:
            package_attention(q, k, v, mask)
            raise RuntimeError("nobody will know")
        except RuntimeError:
            pass
        return own_attention(q, k, v, mask)

    refused("03.attention", sneaky, "`scaled_dot_product_attention` from `tutorial_lib.attention`")


def test_the_distributed_sampler_is_refused_for_rank_indices():
    def sampler(n_examples, rank, world_size, epoch, seed):
        s = DistributedSampler(range(n_examples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        s.set_epoch(epoch)
        return list(s)

    refused("15.rank_indices", sampler, "torch's `torch.utils.data.DistributedSampler`")


def test_an_answer_checked_off_the_main_thread_is_traced_too():
    results = []
    worker = threading.Thread(target=lambda: results.append(
        check("03.attention", lambda q, k, v, mask=None: package_attention(q, k, v, mask))))
    worker.start()
    worker.join()
    assert results[0].kind == "calls_the_work"


# --- what stays allowed ------------------------------------------------------------------------------------------------


def test_the_learners_own_helpers_and_torch_softmax_pass():
    def mine(q, k, v, mask=None):
        return own_attention(q, k, v, mask)

    assert check("03.attention", mine).passed


def test_the_modules_a_case_hands_over_may_be_called():
    def block(x, attention, feed_forward, norm_1, norm_2):  # the package's attention, handed over by the case
        h = x + attention(norm_1(x))
        return h + feed_forward(norm_2(h))

    assert check("06.pre_norm_block", block).passed


def test_only_calls_with_the_learners_code_below_them_count():
    forbidden = Forbidden([F.softmax])
    x = torch.randn(3)
    trace = CallTrace(forbidden)
    trace.run(nn.Softmax(dim=-1), x)  # torch's module calls F.softmax, and nothing of the learner's lies in between
    assert trace.hit is None

    def learner(x):
        return nn.Softmax(dim=-1)(x)

    trace = CallTrace(forbidden)
    trace.run(learner, x)
    assert trace.hit == "torch's `F.softmax`"
    trace = CallTrace(forbidden, learner_codes=callee_codes(nn.Softmax))  # code planted inside a library
    trace.run(nn.Softmax(dim=-1), x)
    assert trace.hit == "torch's `F.softmax`"


EXERCISES = [exercise for chapter in range(1, 16) for exercise in chapter_exercises(f"{chapter:02d}")]


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda exercise: exercise.id)
def test_an_answer_that_calls_the_exercises_reference_is_refused(exercise):
    # The reference as a learner reaches it: the package's function, or the one the checks write out (importable too).
    result = check_recorded(exercise.id, lambda *args, **kwargs: exercise.reference(*args, **kwargs))
    assert (result.kind, result.points) == ("calls_the_work", 0), result.verdict


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda exercise: exercise.id)
def test_the_work_each_exercise_forbids_has_a_readable_name(exercise):
    for callee in exercise.forbidden:
        name = describe_callee(callee)
        assert name.count("`") == (2 if name.startswith("torch's") else 4) and "_VariableFunctions" not in name, name


def test_a_folder_beside_the_package_is_not_the_package():
    from tutorial_lib.checks.tracing import LIBRARY_DIRS, is_library_file

    package = next(folder for folder in LIBRARY_DIRS if folder.rstrip("/").endswith("tutorial_lib"))
    assert is_library_file(package + "attention.py")
    assert not is_library_file(package.rstrip("/") + "_mine/attention.py")  # a learner's folder named alike
