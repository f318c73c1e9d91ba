"""Chapter 08's checks: answers written as learners write them, right and wrong, and the exercises notebook.

The learner functions below are written independently of the catalogue's own implementations in
``tutorial_lib/checks/ch08.py``: a mistake must be recognised by what it does, not by how it is spelt.
``tests/test_checks.py`` already checks, for every chapter, that the reference passes and that each catalogue
variant is named.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from tutorial_lib import grade
from tutorial_lib.checks import chapter_exercises, check
from tutorial_lib.models.gpt import GPT, GPTConfig

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook
from test_checks_ch06 import MyAttention, MyBlock, MyLayerNorm  # a learner's chapter 06 block, for their GPT

ROOT = Path(__file__).resolve().parents[1]


# --- 08.count_parameters ----------------------------------------------------------------------------------------------


def count_by_dict_of_ids(model):
    unique = {id(p): p for p in model.parameters()}
    return sum(p.numel() for p in unique.values())


def count_state_dict(model):
    return sum(v.numel() for _, v in model.state_dict().items())


def count_with_repeats(model):
    total = 0
    for _, parameter in model.named_parameters(remove_duplicate=False):
        total += parameter.numel()
    return total


def count_parameters_and_buffers(model):
    return sum(t.numel() for t in itertools.chain(model.parameters(), model.buffers()))


def count_trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_tensors(model):
    return sum(1 for _ in model.parameters())


# --- 08.gpt2_init (nanoGPT's way, by parameter name) ----------------------------------------------------------------


def nanogpt_style(*, embedding_types=None, residual=lambda n: 0.02 / math.sqrt(2 * n),
                  names=("out_proj.weight", "down.weight"), zero_bias=True, all_linear=False):
    def init(model):
        from tutorial_lib.embeddings import LearnedPositionalEmbedding, TokenEmbedding

        types = embedding_types or (TokenEmbedding, LearnedPositionalEmbedding)

        def init_module(module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=residual(model.cfg.n_layers) if all_linear else 0.02)
                if module.bias is not None and zero_bias:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, types):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        model.apply(init_module)
        if not all_linear:
            for name, p in model.named_parameters():
                if name.endswith(names):
                    torch.nn.init.normal_(p, mean=0.0, std=residual(model.cfg.n_layers))

    return init


# --- 08.gpt_module: a learner's GPT, made of a learner's block (tests/test_checks_ch06.py) ----------------------------


def gpt_like(*, positions="in", mask="tril", norm=True, scale=False, last=False, softmax=False):
    class MyGPT(nn.Module):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind="gelu_tanh"):
            super().__init__()
            self.n_ctx = n_ctx
            self.embed, self.pos_embed = nn.Embedding(d_vocab, d_model), nn.Embedding(n_ctx, d_model)
            self.blocks = nn.ModuleList(MyBlock(d_model, n_heads, d_ff, kind) for _ in range(n_layers))
            self.ln_final = MyLayerNorm(d_model)
            self.unembed = nn.Linear(d_model, d_vocab, bias=False)
            self.unembed.weight = self.embed.weight

        def forward(self, tokens):
            length = tokens.size(1)
            if length > self.n_ctx:
                raise ValueError("too long")
            h = self.embed(tokens) * (math.sqrt(self.embed.embedding_dim) if scale else 1.0)
            if positions == "in":
                h = h + self.pos_embed(torch.arange(length))
            causal = {"tril": torch.tril(torch.ones(length, length)).bool(), "none": None,
                      "triu": torch.triu(torch.ones(length, length)).bool()}[mask]
            for block in self.blocks:
                h = block(h, mask=causal)
            if positions == "out":
                h = h + self.pos_embed(torch.arange(length))
            if norm:
                h = self.ln_final(h)
            logits = h @ self.unembed.weight.T
            if last:
                logits = logits[:, -1, :]
            return logits.softmax(-1) if softmax else logits

    return MyGPT


LEARNER_MISTAKES = [
    ("08.count_parameters", count_state_dict, "summed_state_dict"),
    ("08.count_parameters", count_with_repeats, "counted_tied_matrix_twice"),
    ("08.count_parameters", count_parameters_and_buffers, "counted_buffers"),
    ("08.count_parameters", count_trainable, "trainable_only"),
    ("08.count_parameters", count_tensors, "counted_tensors"),
    ("08.gpt2_init", nanogpt_style(names=()), "no_residual_scaling"),
    ("08.gpt2_init", nanogpt_style(residual=lambda n: 0.02 * n**-0.5), "scaled_by_sqrt_n_layers"),
    ("08.gpt2_init", nanogpt_style(residual=lambda n: 0.02 / 2 / n), "forgot_square_root"),
    ("08.gpt2_init", nanogpt_style(all_linear=True), "scaled_every_linear"),
    ("08.gpt2_init", nanogpt_style(names=("out_proj.weight", "up.weight")), "scaled_ffn_up"),
    ("08.gpt2_init", nanogpt_style(zero_bias=False), "biases_not_zeroed"),
    ("08.gpt2_init", nanogpt_style(embedding_types=(nn.Embedding,)), "embeddings_not_initialised"),
    ("08.gpt_module", gpt_like(norm=False), "no_final_norm"),
    ("08.gpt_module", gpt_like(positions="none"), "no_positions"),
    ("08.gpt_module", gpt_like(positions="out"), "positions_after_blocks"),
    ("08.gpt_module", gpt_like(mask="none"), "not_causal"),
    ("08.gpt_module", gpt_like(mask="triu"), "mask_upside_down"),
    ("08.gpt_module", gpt_like(scale=True), "scaled_embeddings"),
    ("08.gpt_module", gpt_like(softmax=True), "returned_probabilities"),
    ("08.gpt_module", gpt_like(last=True), "last_position_only"),
    ("08.predict_gpt2_parameters", lambda: 12 * 12 * 768**2 + 2 * 50257 * 768 + 1024 * 768, "tied_counted_twice"),
    ("08.predict_gpt2_parameters", lambda: 12 * 12 * 768**2, "blocks_only"),
    ("08.predict_gpt2_parameters", lambda: 12 * 4 * 768**2, "attention_only"),
    ("08.predict_gpt2_parameters", lambda: 1.5e9, "gpt2_xl"),
    ("08.predict_own_token_share", lambda: 1 / 65, "random_guess"),
    ("08.predict_own_token_share", lambda: 0.0, "never_itself"),
    ("08.predict_own_token_share", lambda: 0.15, "one_favourite_character"),
    ("08.predict_own_token_share", lambda: 0.5, "coin_flip"),
]


@pytest.mark.parametrize(
    ("exercise_id", "learner", "mistake"), LEARNER_MISTAKES, ids=[mistake for _, _, mistake in LEARNER_MISTAKES]
)
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    catalogued = {(exercise.id, mistake.name) for exercise in chapter_exercises("08") for mistake in exercise.mistakes}
    assert catalogued == {(exercise_id, mistake) for exercise_id, _, mistake in LEARNER_MISTAKES}


@pytest.mark.parametrize(
    ("exercise_id", "answer"),
    [
        ("08.count_parameters", count_by_dict_of_ids),
        ("08.gpt2_init", nanogpt_style()),
        ("08.gpt_module", gpt_like()),
    ],
    ids=["dict-of-ids", "nanogpt-style", "matmul-unembedding"],
)
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    result = check_recorded(exercise_id, answer)
    assert result.passed, result.verdict


def test_an_initialisation_that_assumes_every_linear_has_a_bias_shows_the_line():
    """The unembedding has no bias (nor has any layer of a ``bias=False`` GPT): ``zeros_(None)`` raises."""

    def zeroes_every_bias(model):
        nanogpt_style()(model)
        for module in model.modules():
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    result = check("08.gpt2_init", zeroes_every_bias)
    assert result.kind == "raised" and result.mistake is None
    assert "AttributeError: 'NoneType' object has no attribute 'zero_'" in result.verdict
    assert "of your code: `nn.init.zeros_(module.bias)`" in result.verdict


def init_with(draw):
    """A GPT-2 initialisation whose matrices come from ``draw(weight, std)`` (the right stds, biases and norms)."""

    def gpt2_init_(model):
        for module in model.modules():
            if isinstance(module, nn.Linear):
                draw(module.weight, 0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding) or type(module).__name__.endswith("Embedding"):
                draw(module.weight, 0.02)
        for block in model.blocks:
            for weight in (block.attn.out_proj.weight, block.ffn.down.weight):
                draw(weight, 0.02 / math.sqrt(2 * model.cfg.n_layers))

    return gpt2_init_


def test_an_initialisation_is_checked_on_its_draws_not_only_their_rms():
    def constant(weight, std):
        nn.init.constant_(weight, std)

    def uncentred(weight, std):  # |x| of a normal draw, rescaled to the same RMS: every entry positive
        with torch.no_grad():
            weight.copy_(torch.randn_like(weight).abs() * std)

    shared = {}

    def one_draw_for_every_block(weight, std):  # the same numbers in every matrix of a shape
        with torch.no_grad():
            weight.copy_(shared.setdefault((weight.shape, std), torch.randn_like(weight) * std))

    assert check("08.gpt2_init", init_with(lambda weight, std: nn.init.normal_(weight, std=std))).passed
    for draw, words in ((constant, "holds one value"), (uncentred, "centred on 0"),
                        (one_draw_for_every_block, "are the same draw")):
        result = check("08.gpt2_init", init_with(draw))
        assert result.points == 0 and words in result.verdict, result.verdict


def test_a_wrong_gpt_that_no_mistake_explains_is_located_at_its_first_differing_module():
    class WrongAttention(MyAttention):  # the scores scaled by 1/d_head: no catalogued GPT mistake
        def forward(self, x, context=None, mask=None):
            return super().forward(x / self.n_heads**0.25, context, mask)

    class WrongGPT(gpt_like()):
        def __init__(self, *args):
            super().__init__(*args)
            for block in self.blocks:
                block.attn.__class__ = WrongAttention

    result = check("08.gpt_module", WrongGPT)
    assert result.kind == "wrong_values" and result.mistake is None
    assert "Your first module whose output differs from the book's model is blocks.0.attn (" in result.verdict
    assert "\n" not in result.verdict and len(result.verdict) < 900


def test_the_gpt_must_be_tied_and_named_as_the_books():
    class Untied(gpt_like()):
        def __init__(self, *args):
            super().__init__(*args)
            self.unembed.weight = nn.Parameter(self.embed.weight.detach().clone())

    assert "tie them" in check("08.gpt_module", Untied).verdict


def test_the_reference_is_the_packages_gpt_with_renamed_norms():
    from tutorial_lib.build_track import my_gpt_state_dict
    from tutorial_lib.checks.ch08 import BookGPT

    torch.manual_seed(0)
    cfg = GPTConfig(d_vocab=13, n_ctx=10, d_model=16, n_heads=2, n_layers=2, activation="relu")
    package = GPT(cfg).eval()
    with torch.no_grad():
        for p in package.parameters():
            p.add_(0.2 * torch.randn_like(p))
    book = BookGPT(13, 10, 16, 2, 2, cfg.d_ff, "relu").eval()
    book.load_state_dict(my_gpt_state_dict(package.state_dict()), strict=True)
    tokens = torch.randint(0, 13, (3, 10))
    torch.testing.assert_close(book(tokens), package(tokens))


def test_the_checks_build_fresh_models_so_a_learner_cannot_change_what_the_reference_sees():
    def counts_then_grows_the_model(model):
        count = sum(p.numel() for p in model.parameters())
        model.add_module("extra", nn.Linear(10, 10))  # the reference, run after it on the same case, must not see this
        return count

    assert check("08.count_parameters", counts_then_grows_the_model).passed


def test_a_fresh_exercises_notebook_runs_and_scores_zero():
    result = grade.grade_notebook(ROOT / "exercises" / "08_gpt.ipynb")
    assert result.status == "ran to the end"
    assert [(g.exercise_id, g.points, g.max_points, g.summary) for g in result.exercises] == [
        ("08.count_parameters", 0, 1, "not attempted yet"),
        ("08.gpt2_init", 0, 2, "not attempted yet"),
        ("08.gpt_module", 0, 4, "not attempted yet"),
        ("08.predict_gpt2_parameters", 0, 1, "not attempted yet"),
        ("08.predict_own_token_share", 0, 1, "not attempted yet"),
    ]


def test_the_predicted_count_is_gpt2_small_and_a_forgotten_embedding_is_named(predict):
    from tutorial_lib.checks.ch08 import gpt2_small_parameters

    d, vocab, positions, layers = 768, 50257, 1024, 12
    assert gpt2_small_parameters() == layers * (12 * d**2 + 13 * d) + (vocab + positions) * d + 2 * d
    assert predict("08.predict_gpt2_parameters", lambda: 124e6).passed
    assert predict("08.predict_gpt2_parameters", lambda: layers * 12 * d**2).mistake == "blocks_only"


def test_an_untrained_tied_model_mostly_predicts_the_character_it_reads(predict):
    from tutorial_lib.checks.ch08 import top_prediction_is_input_share

    assert 0.8 < top_prediction_is_input_share() < 0.95
    assert top_prediction_is_input_share(tie_embeddings=False) < 0.05  # untied: about one in 65, as a random guess
    assert predict("08.predict_own_token_share", lambda: 0.9).passed  # the solution's reasoning
    assert predict("08.predict_own_token_share", lambda: 1 / 65).mistake == "random_guess"
    assert predict("08.predict_own_token_share", lambda: 0).mistake == "never_itself"
    assert predict("08.predict_own_token_share", lambda: 0.15).mistake == "one_favourite_character"
    assert predict("08.predict_own_token_share", lambda: 0.5).mistake == "coin_flip"
