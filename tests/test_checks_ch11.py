"""Chapter 11's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.recipes.ablation import Skip
from tutorial_lib.checks import check, get_exercise
from tutorial_lib.stats import t_quantile

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook

# --- 11.remove_attention ----------------------------------------------------------------------------------------------


class Nothing(nn.Module):
    """A learner's own skip: ignores the sublayer and hands the stream back."""

    def forward(self, x, sublayer):
        return x


def surgery_right(model):
    for i in range(len(model.blocks)):
        model.blocks[i].attn_residual = Nothing()
        model.blocks[i].attn = None


def surgery_returning_model(model):
    for block in model.blocks:
        del block.attn
        block.attn_residual = Skip()
    return model


def surgery_like(**wrong):
    def remove_attention(model):
        blocks = model.blocks[:1] if wrong.get("first_only") else model.blocks
        for block in blocks:
            if wrong.get("zero"):
                with torch.no_grad():
                    block.attn.out_proj.weight.mul_(0)
                    block.attn.out_proj.bias.mul_(0)
            elif wrong.get("ffn"):
                block.ffn_residual = Nothing()
                block.ffn = None
            elif wrong.get("keep_residual"):
                block.attn = type("Same", (nn.Module,), {"forward": lambda self, h, **kw: h})()
            elif wrong.get("keep_weights"):
                block.attn_residual = Nothing()
            else:
                block.attn_residual = Nothing()
                block.attn = None

    return remove_attention


def no_blocks(model):
    del model.blocks[:]


# --- 11.block_gradient_norms ------------------------------------------------------------------------------------------


def probe_right(model, tokens, targets):
    for p in model.parameters():
        p.grad = None
    loss = F.cross_entropy(model(tokens).transpose(1, 2), targets)
    grads = torch.autograd.grad(loss, [p for p in model.parameters()], allow_unused=True)
    by_param = {id(p): g for p, g in zip(model.parameters(), grads)}
    out = []
    for block in model.blocks:
        flat = torch.cat([by_param[id(p)].reshape(-1) for p in block.parameters() if by_param[id(p)] is not None])
        out.append(torch.linalg.vector_norm(flat))
    return torch.stack(out)


def probe_as_list(model, tokens, targets):
    model.zero_grad()
    F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten()).backward()
    return [math.sqrt(sum(float((p.grad**2).sum()) for p in block.parameters() if p.grad is not None))
            for block in model.blocks]


def probe_like(**wrong):
    def block_gradient_norms(model, tokens, targets):
        if not wrong.get("no_zero"):
            for p in model.parameters():
                p.grad = None
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               reduction="sum" if wrong.get("sum") else "mean")
        loss.backward()
        result = []
        for block in model.blocks:
            params = [p for p in block.parameters() if p.grad is not None]
            if wrong.get("matrices"):
                params = [p for p in params if p.ndim == 2]
            values = [p.data if wrong.get("weights") else p.grad for p in params]
            if wrong.get("add_norms"):
                result.append(sum(torch.linalg.norm(v) for v in values))
            elif wrong.get("mean_abs"):
                result.append(torch.cat([v.abs().flatten() for v in values]).mean())
            else:
                result.append(torch.linalg.vector_norm(torch.cat([v.flatten() for v in values])))
        return torch.stack(result)

    return block_gradient_norms


# --- 11.within_noise --------------------------------------------------------------------------------------------------


def noise_right(baseline_losses, row_losses, confidence=0.95):
    base = np.asarray(baseline_losses, dtype=float)
    marks = {}
    for row, losses in row_losses.items():
        row_values = np.asarray(losses, dtype=float)
        if row_values.size < 2:
            raise ValueError(f"row_losses[{row!r}]: need two seeds or more")
        d = row_values - base[: row_values.size]
        half = t_quantile((1 + confidence) / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
        marks[row] = bool(d.mean() - half <= 0 <= d.mean() + half)
    return marks


def noise_with_package_stats(baseline_losses, row_losses, confidence=0.95):
    from tutorial_lib.stats import compare_paired

    marks = {}
    for row, losses in row_losses.items():
        c = compare_paired(baseline_losses[: len(losses)], losses, confidence=confidence)
        marks[row] = np.bool_(c.low <= 0 <= c.high)  # a numpy bool is understood
    return marks


def noise_like(**wrong):
    def within_noise(baseline_losses, row_losses, confidence=0.95):
        marks = {}
        for row, losses in row_losses.items():
            n = len(losses)
            if n < 2:
                raise ValueError("a row needs at least two seeds")
            base = list(baseline_losses) if wrong.get("whole") else list(baseline_losses)[:n]
            if wrong.get("unpaired") or wrong.get("whole"):
                diff = np.mean(losses) - np.mean(base)
                se = math.sqrt(np.var(losses, ddof=1) / n + np.var(base, ddof=1) / len(base))
                df = n + len(base) - 2
            else:
                d = [x - b for x, b in zip(losses, base)]
                diff = sum(d) / n
                sd = np.std(d, ddof=0 if wrong.get("pop") else 1)
                se = sd if wrong.get("no_sqrt") else sd / math.sqrt(n)
                df = n if wrong.get("df_n") else n - 1
            if wrong.get("z"):
                q = 1.959963984540054 if confidence == 0.95 else NormalDist().inv_cdf((1 + confidence) / 2)
            else:
                q = t_quantile(confidence if wrong.get("one_sided") else (1 + confidence) / 2, df)
            marks[row] = abs(diff) <= q * se
        return marks

    return within_noise


def noise_two_sigma(baseline_losses, row_losses, confidence=0.95):
    # The chapter's old screen: the row's mean within 2σ of the baseline's mean.
    mean, sigma = np.mean(baseline_losses), np.std(baseline_losses, ddof=1)
    marks = {}
    for row, losses in row_losses.items():
        if len(losses) < 2:
            raise ValueError("two seeds at least")
        marks[row] = bool(abs(np.mean(losses) - mean) <= 2 * sigma)
    return marks


# --- 11.ablated_gpt: the chapter's removals on a learner's GPT of chapter 08 (one that passes 08.gpt_module) --------


class Zero(nn.Module):
    def forward(self, x, mask=None):
        return 0 * x


class PassOn(nn.Module):  # nn.Identity, made to take the mask the block hands its attention
    def forward(self, x, mask=None):
        return x


def ablated_like(*, sublayer="zero", its_norm=True, final_norm=True, positions="drop", mask=True, first_only=False,
                 refuse=True):
    from tutorial_lib.checks.ch08 import _gpt_module_like

    class AblatedGPT(_gpt_module_like()):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind="gelu_tanh", remove=()):
            remove = set(remove)
            if refuse and remove - {"attention", "ffn", "positions", "norms", "causal_mask"}:
                raise ValueError(f"remove: unknown parts {remove}")
            super().__init__(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)
            self.removed = remove
            for block in list(self.blocks)[: 1 if first_only else None]:
                for part, norm, layer in (("attention", "ln_1", "attn"), ("ffn", "ln_2", "ffn")):
                    if part in remove:
                        gone = Zero() if sublayer == "zero" else PassOn() if part == "attention" else nn.Identity()
                        setattr(block, layer, gone)
                        if its_norm or "norms" in remove:
                            setattr(block, norm, nn.Identity())
                if "norms" in remove:
                    block.ln_1 = block.ln_2 = nn.Identity()
            if "norms" in remove and final_norm:
                self.ln_final = nn.Identity()
            if "positions" in remove and positions == "drop":
                del self.pos_embed

        def forward(self, tokens):
            seq = tokens.shape[1]
            x = self.embed(tokens)
            if hasattr(self, "pos_embed") and not ("positions" in self.removed and positions == "unused"):
                x = x + self.pos_embed.weight[:seq]
            causal = torch.ones(seq, seq, dtype=torch.bool).tril()
            for block in self.blocks:
                x = block(x, mask=None if ("causal_mask" in self.removed and mask) else causal)
            return self.unembed(self.ln_final(x))

    return AblatedGPT


@pytest.mark.parametrize("part", ["attention", "ffn", "positions", "norms", "causal_mask"])
def test_the_ablated_reference_computes_what_the_runners_change_computes(part):
    from tutorial_lib.build_track import my_gpt_state_dict
    from tutorial_lib.checks.ch11 import ReferenceAblatedGPT, reference_remove_attention
    from tutorial_lib.models.gpt import GPT, GPTConfig
    from tutorial_lib.recipes.ablation import CHANGES

    surgery = {"attention": reference_remove_attention, "ffn": CHANGES["no_ffn"].surgery,
               "positions": CHANGES["no_positions"].surgery, "norms": CHANGES["no_norm"].surgery,
               "causal_mask": CHANGES["no_causal_mask"].surgery}[part]
    torch.manual_seed(0)
    cfg = GPTConfig(d_vocab=13, n_ctx=10, d_model=16, n_heads=2, n_layers=2, activation="relu")
    package = GPT(cfg)
    with torch.no_grad():
        for p in package.parameters():
            p.add_(0.2 * torch.randn_like(p))
    surgery(package)
    weights = {name.replace(".block.", "."): t for name, t in package.state_dict().items()}  # no_causal_mask's wrapper
    book = ReferenceAblatedGPT(13, 10, 16, 2, 2, cfg.d_ff, "relu", remove=(part,)).eval()
    book.load_state_dict(my_gpt_state_dict(weights), strict=True)
    tokens = torch.randint(0, 13, (3, 10))
    torch.testing.assert_close(book(tokens), package.eval()(tokens))
    assert sum(p.numel() for p in book.parameters()) == sum(p.numel() for p in package.parameters())


def test_an_ablated_gpt_written_differently_passes():
    assert check("11.ablated_gpt", ablated_like()).passed


LEARNER_MISTAKES = [
    ("11.remove_attention", surgery_like(keep_residual=True), "identity_inside_residual"),
    ("11.remove_attention", surgery_like(first_only=True), "first_block_only"),
    ("11.remove_attention", surgery_like(zero=True), "zeroed_output_projection"),
    ("11.remove_attention", surgery_like(ffn=True), "removed_ffn_instead"),
    ("11.remove_attention", surgery_like(keep_weights=True), "left_attention_parameters"),
    ("11.block_gradient_norms", probe_like(no_zero=True), "stale_gradients"),
    ("11.block_gradient_norms", probe_like(weights=True), "norm_of_weights"),
    ("11.block_gradient_norms", probe_like(add_norms=True), "sum_of_norms"),
    ("11.block_gradient_norms", probe_like(mean_abs=True), "mean_absolute_gradient"),
    ("11.block_gradient_norms", probe_like(matrices=True), "weight_matrices_only"),
    ("11.block_gradient_norms", probe_like(sum=True), "summed_loss"),
    ("11.within_noise", noise_two_sigma, "baseline_sigma"),
    ("11.within_noise", noise_like(unpaired=True), "unpaired"),
    ("11.within_noise", noise_like(z=True), "z_quantile"),
    ("11.within_noise", noise_like(one_sided=True), "one_sided_quantile"),
    ("11.within_noise", noise_like(df_n=True), "degrees_of_freedom_n"),
    ("11.within_noise", noise_like(no_sqrt=True), "forgot_sqrt_n"),
    ("11.within_noise", noise_like(pop=True), "population_std"),
    ("11.within_noise", noise_like(whole=True), "whole_baseline"),
    ("11.ablated_gpt", ablated_like(sublayer="identity"), "sublayer_passes_its_input"),
    ("11.ablated_gpt", ablated_like(its_norm=False), "norm_left_behind"),
    ("11.ablated_gpt", ablated_like(final_norm=False), "final_norm_kept"),
    ("11.ablated_gpt", ablated_like(positions="kept"), "positions_kept"),
    ("11.ablated_gpt", ablated_like(positions="unused"), "position_table_kept"),
    ("11.ablated_gpt", ablated_like(mask=False), "still_causal"),
    ("11.ablated_gpt", ablated_like(first_only=True), "first_block_only"),
    ("11.ablated_gpt", ablated_like(refuse=False), "unknown_part_accepted"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}-{i}" for i, (e, _, m) in enumerate(LEARNER_MISTAKES)])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_deleting_the_blocks_loses_the_points_without_a_catalogued_name():
    # Not a mistake a learner makes when asked to remove one sublayer, so it is not catalogued: it is described.
    result = check("11.remove_attention", no_blocks)
    assert result.points == 0 and result.mistake is None and not result.candidates, result.verdict


def test_every_catalogued_mistake_has_a_learner_version_here():
    exercises = ("11.remove_attention", "11.block_gradient_norms", "11.within_noise", "11.ablated_gpt")
    catalogued = {(e, m.name) for e in exercises for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("11.remove_attention", surgery_right), ("11.remove_attention", surgery_returning_model),
    ("11.remove_attention", surgery_like()), ("11.block_gradient_norms", probe_right),
    ("11.block_gradient_norms", probe_as_list), ("11.block_gradient_norms", probe_like()),
    ("11.within_noise", noise_right), ("11.within_noise", noise_with_package_stats), ("11.within_noise", noise_like()),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    result = check_recorded(exercise_id, answer)
    assert result.passed, result.verdict


def test_a_surgery_that_returns_something_else_is_told_what_is_expected():
    result = check("11.remove_attention", lambda model: "done")
    assert result.kind == "wrong_type" and "edit the model in place" in result.verdict


def test_a_noise_reader_that_does_not_refuse_a_single_seed_loses_its_point():
    def no_check(baseline_losses, row_losses, confidence=0.95):
        marks = {}
        for row, losses in row_losses.items():
            d = np.asarray(losses) - np.asarray(baseline_losses[: len(losses)])
            half = t_quantile((1 + confidence) / 2, max(d.size - 1, 1)) * (d.std(ddof=1) if d.size > 1 else 0.0)
            marks[row] = bool(abs(d.mean()) <= half / math.sqrt(d.size))
        return marks

    result = check("11.within_noise", no_check)
    assert result.points == 0 and "ValueError" in result.verdict, result.verdict
