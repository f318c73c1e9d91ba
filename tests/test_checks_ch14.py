"""Chapter 14's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.checks import check, get_exercise
from tutorial_lib.models.bert import IGNORE_INDEX, mask_tokens, pretraining_loss

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook

# --- 14.mask_tokens -------------------------------------------------------------------------------------------------------


def masking_right(tokens, mask_id, d_vocab, special_ids, generator, p=0.15):
    special = torch.zeros(d_vocab, dtype=torch.bool)
    for i in special_ids:
        special[i] = True
    candidates = torch.arange(d_vocab)[~special]
    chosen = (torch.rand(tokens.shape, generator=generator) < p) & ~special[tokens]
    u = torch.rand(tokens.shape, generator=generator)
    replacement = candidates[torch.randint(0, candidates.numel(), tokens.shape, generator=generator)]
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    swap = chosen & (u >= 0.8) & (u < 0.9)
    inputs[swap] = replacement[swap]
    labels = torch.full_like(tokens, -100)
    labels[chosen] = tokens[chosen]
    return inputs, labels


def masking_like(**wrong):
    def mask_tokens(tokens, mask_id, d_vocab, special_ids, generator, p=0.15):
        is_special = torch.isin(tokens, torch.tensor(special_ids))
        ordinary = [i for i in range(d_vocab) if i not in special_ids]
        selected = torch.rand(tokens.shape, generator=generator) < p
        if not wrong.get("specials"):
            selected &= ~is_special
        action = torch.rand(tokens.shape, generator=generator)
        if wrong.get("whole_vocab"):
            random_tokens = torch.randint(d_vocab, tokens.shape, generator=generator)
        else:
            random_tokens = torch.tensor(ordinary)[torch.randint(len(ordinary), tokens.shape, generator=generator)]
        where = ~is_special if wrong.get("all_tokens") else selected
        out = tokens.clone()
        if wrong.get("only_mask"):  # the learner who never uses action or the random draw
            out = torch.where(selected, mask_id, tokens)
        else:
            out = torch.where(where & (action < 0.8), mask_id, out)
            out = torch.where(where & (action >= 0.8) & (action < 0.9), random_tokens, out)
        if wrong.get("labels_all"):
            labels = tokens.clone()
        elif wrong.get("labels_mask"):
            labels = torch.where(out == mask_id, tokens, -100)
        else:
            labels = torch.where(selected, tokens, -100)
        return out, labels

    return mask_tokens


# --- 14.mlm_loss ----------------------------------------------------------------------------------------------------------


def loss_right(logits, targets, chosen):
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return -(picked * chosen).sum() / chosen.sum()


def loss_with_ignore_index(logits, targets, chosen):
    labels = targets.masked_fill(~chosen, -100)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def loss_like(**wrong):
    def mlm_loss(logits, targets, chosen):
        if wrong.get("every"):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        nll = -torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
        if wrong.get("zeros"):
            return (nll * chosen).mean()
        if wrong.get("sum"):
            return nll[chosen].sum()
        if wrong.get("inverted"):
            return nll[~chosen].mean()
        if wrong.get("per_sequence"):
            return torch.stack([row[keep].mean() for row, keep in zip(nll, chosen)]).mean()
        return nll[chosen].mean()

    return mlm_loss


def loss_log_of_softmax(logits, targets, chosen):
    probs = F.softmax(logits, dim=-1)
    return -torch.log(probs[chosen].gather(1, targets[chosen].unsqueeze(1))).mean()


def loss_softmax_dim_1(logits, targets, chosen):
    return F.nll_loss(F.log_softmax(logits, dim=1)[chosen], targets[chosen])


# --- 14.nsp_pairs ---------------------------------------------------------------------------------------------------------


def pairs_right(lines, generator):
    n = len(lines)
    coin = torch.rand(n - 1, generator=generator).tolist()
    draw = torch.randint(0, n - 2, (n - 1,), generator=generator).tolist()
    out = []
    for i in range(n - 1):
        if coin[i] < 0.5:
            out.append((lines[i], lines[i + 1], 0))
        else:
            others = [line for k, line in enumerate(lines) if k not in (i, i + 1)]
            out.append((lines[i], others[draw[i]], 1))
    return out


def pairs_like(**wrong):
    def nsp_pairs(lines, generator):
        n = len(lines)
        count = n if wrong.get("wrap") else n - 1
        coin = torch.rand(count, generator=generator)
        draw = torch.randint(n if wrong.get("any") else n - 2, (count,), generator=generator)
        out = []
        for i in range(count):
            take_random = bool(coin[i] < 0.5) if wrong.get("reversed") else bool(coin[i] >= 0.5)
            if take_random:
                j = int(draw[i])
                if not (wrong.get("raw") or wrong.get("any")) and j >= i:
                    j += 2
                first, second = (lines[j], lines[i]) if wrong.get("random_first") else (lines[i], lines[j])
                out.append((first, second, 0 if wrong.get("swap") else 1))
            else:
                out.append((lines[i], lines[(i + 1) % n], 1 if wrong.get("swap") else 0))
        return out

    return nsp_pairs


LEARNER_MISTAKES = [
    ("14.mask_tokens", masking_like(specials=True), "special_tokens_chosen"),
    ("14.mask_tokens", masking_like(whole_vocab=True), "random_from_whole_vocabulary"),
    ("14.mask_tokens", masking_like(all_tokens=True), "rule_applied_to_every_token"),
    ("14.mask_tokens", masking_like(labels_all=True), "labels_on_unchosen_positions"),
    ("14.mask_tokens", masking_like(labels_mask=True), "labels_only_at_mask"),
    ("14.mask_tokens", masking_like(only_mask=True), "always_mask"),
    ("14.mlm_loss", loss_like(every=True), "every_position"),
    ("14.mlm_loss", loss_like(zeros=True), "unchosen_counted_as_zero"),
    ("14.mlm_loss", loss_like(sum=True), "summed"),
    ("14.mlm_loss", loss_like(inverted=True), "unchosen_positions"),
    ("14.mlm_loss", loss_like(per_sequence=True), "mean_per_sequence"),
    ("14.mlm_loss", loss_log_of_softmax, "log_of_softmax"),
    ("14.mlm_loss", loss_softmax_dim_1, "softmax_over_positions"),
    ("14.nsp_pairs", pairs_like(swap=True), "labels_swapped"),
    ("14.nsp_pairs", pairs_like(raw=True), "random_index_not_moved"),
    ("14.nsp_pairs", pairs_like(any=True), "random_from_every_line"),
    ("14.nsp_pairs", pairs_like(wrap=True), "pair_for_the_last_line"),
    ("14.nsp_pairs", pairs_like(reversed=True), "coin_reversed"),
    ("14.nsp_pairs", pairs_like(random_first=True), "random_line_first"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}" for e, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_issue_mistake_has_a_learner_version_here():
    """The mistakes the issue lists, each written here by hand and named by its check."""
    issue = {("14.mask_tokens", "special_tokens_chosen"), ("14.mask_tokens", "random_from_whole_vocabulary"),
             ("14.mlm_loss", "every_position"), ("14.mask_tokens", "rule_applied_to_every_token"),
             ("14.mask_tokens", "labels_on_unchosen_positions")}
    assert issue <= {(e, m) for e, _, m in LEARNER_MISTAKES}
    catalogued = {(e, m.name) for e in ("14.mask_tokens", "14.mlm_loss", "14.nsp_pairs") for m in get_exercise(e).mistakes}
    assert {(e, m) for e, _, m in LEARNER_MISTAKES} <= catalogued
    assert len(catalogued - {(e, m) for e, _, m in LEARNER_MISTAKES}) <= 1  # the swapped ranges: a catalogue variant only


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("14.mask_tokens", masking_right), ("14.mask_tokens", masking_like()), ("14.mlm_loss", loss_right),
    ("14.mlm_loss", loss_with_ignore_index), ("14.mlm_loss", loss_like()), ("14.nsp_pairs", pairs_right),
    ("14.nsp_pairs", pairs_like()),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    assert check_recorded(exercise_id, answer).passed


def test_a_masking_answer_that_forgets_the_generator_is_told_so():
    def mask_tokens_global(tokens, mask_id, d_vocab, special_ids, generator, p=0.15):
        return masking_right(tokens, mask_id, d_vocab, special_ids, None, p)

    result = check("14.mask_tokens", mask_tokens_global)
    assert result.kind == "randomness" and "global random generator" in result.verdict


def test_the_mlm_loss_reference_is_the_packages_loss_without_nsp():
    from tutorial_lib.checks.ch14 import reference_mlm_loss

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 11, generator=generator)
    tokens = torch.randint(5, 11, (3, 7), generator=generator)
    inputs, labels = mask_tokens(tokens, 4, 11, [0, 1, 2, 3, 4], generator, p=0.5)
    chosen = labels != IGNORE_INDEX
    nsp_logits, is_random_next = torch.zeros(3, 2), torch.zeros(3, dtype=torch.long)  # NSP adds ln 2
    expected = pretraining_loss(logits, nsp_logits, labels, is_random_next) - torch.log(torch.tensor(2.0))
    torch.testing.assert_close(reference_mlm_loss(logits, tokens, chosen), expected)


# --- 14.predict_pairs_without_label -------------------------------------------------------------------------------------


def test_the_pairs_without_a_label_are_measured_and_misconceptions_named(predict):
    from tutorial_lib.checks.ch14 import pairs_without_label_share

    share = pairs_without_label_share()
    # more than an average pair's chance (0.85 ** 15.6 = 0.079), since short pairs escape far more often than long ones
    assert 0.09 < share < 0.13
    assert predict("14.predict_pairs_without_label", lambda: 0.1).passed  # the solution's reasoning
    assert predict("14.predict_pairs_without_label", lambda: 0.079).passed  # an average pair's chance
    assert predict("14.predict_pairs_without_label", lambda: 0).mistake == "every_pair_labelled"
    assert predict("14.predict_pairs_without_label", lambda: 0.85).mistake == "one_token_unchosen"
    assert predict("14.predict_pairs_without_label", lambda: 0.049).mistake == "special_tokens_counted"
    assert predict("14.predict_pairs_without_label", lambda: 0.0004).mistake == "padding_counted"


# --- 14.bert_module (the build track's BERT) ------------------------------------------------------------------------------


def test_the_bert_reference_is_the_packages_pretraining_model_with_renamed_weights():
    from tutorial_lib.build_track import my_bert_state_dict
    from tutorial_lib.checks.ch14 import BookBERT
    from tutorial_lib.models.bert import BERTConfig, BERTForPreTraining

    torch.manual_seed(0)
    cfg = BERTConfig(d_vocab=13, n_ctx=10, d_model=16, n_heads=2, n_layers=2, d_ff=24, dropout=0.0, eps=1e-6)
    package = BERTForPreTraining(cfg).eval()
    with torch.no_grad():
        for p in package.parameters():
            p.add_(0.2 * torch.randn_like(p))
    book = BookBERT(13, 10, 16, 2, 2, 24, 2, 1e-6).eval()
    book.load_state_dict(my_bert_state_dict(package.state_dict()), strict=True)
    tokens, segments = torch.randint(0, 13, (3, 10)), (torch.arange(10) >= 4).long().expand(3, 10)
    mask = (torch.arange(10) < torch.tensor([10, 7, 4])[:, None])[:, None, :]
    torch.testing.assert_close(book(tokens, segments, mask=mask), package(tokens, segments, mask=mask)[0])


def _bert_like(**wrong):
    from tutorial_lib.checks.ch14 import _bert_module_like

    learner = _bert_module_like(**wrong)
    learner.__module__ = __name__  # written in a notebook, not in the package's catalogue
    return learner


def test_a_right_bert_passes_and_a_gpt_habit_is_named():
    assert check("14.bert_module", _bert_like()).passed
    pre_norm = check("14.bert_module", _bert_like(placement="pre"))
    assert pre_norm.mistake == "pre_norm_blocks" and pre_norm.points == 0


def test_a_bert_that_differs_nowhere_known_is_located_at_its_first_wrong_module():
    from tutorial_lib.checks.ch04 import _mha_like

    class ScoresNotScaled(_mha_like()):
        def forward(self, x, context=None, mask=None):
            return super().forward(x * 3.0, mask=mask)

    class WrongBERT(_bert_like()):
        def __init__(self, *args):
            super().__init__(*args)
            self.blocks[1].attn.__class__ = ScoresNotScaled

    result = check("14.bert_module", WrongBERT)
    assert result.kind == "wrong_values" and result.mistake is None
    assert "Your first module whose output differs from the book's model is blocks.1.attn (" in result.verdict


def test_the_packages_bert_and_torchs_layers_score_nothing():
    from tutorial_lib.models.bert import BERTConfig, BERTForPreTraining

    class Wrapped(torch.nn.Module):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, n_segments=2, eps=1e-12):
            super().__init__()
            self.inner = BERTForPreTraining(BERTConfig(d_vocab=d_vocab, n_ctx=n_ctx, d_model=d_model, n_heads=n_heads,
                                                       n_layers=n_layers, d_ff=d_ff, eps=eps, dropout=0.0))

        def forward(self, tokens, segments=None, mask=None):
            return self.inner(tokens, segments, mask=mask)[0]

    assert check("14.bert_module", Wrapped).kind in ("calls_the_work", "wrong_type")
