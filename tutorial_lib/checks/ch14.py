"""Chapter 14's exercises: BERT's masking, the MLM loss over the chosen positions, and next-sentence pairs.

- ``14.mask_tokens`` is :func:`tutorial_lib.models.bert.mask_tokens`, with its three draws from the generator in a
  prescribed order (which tokens are chosen, what each becomes, which random token), so that an answer can be
  compared value for value.
- ``14.mlm_loss`` is the cross-entropy averaged over the chosen positions only, given the original tokens and the
  boolean ``chosen``; a case has a sequence with no chosen position, one has float32 logits large enough to
  underflow a softmax.
- ``14.nsp_pairs`` is :func:`tutorial_lib.data.dialogue.nsp_pairs`: one pair per line that has a next line, half of
  them with a random line that is neither A nor its next line.
- ``14.fine_tune_step`` (the build exercise) composes the padding mask, the classifier, its cross-entropy and the
  optimizer into one update (:func:`tutorial_lib.recipes.bert.classification_loss`, then backward and step); tiny
  float64 classifiers with SGD, some holding the gradients of an earlier batch.
- ``14.predict_mask_share`` (predict, then measure): the share of ordinary tokens that the masking turns into [MASK].
- ``14.predict_pairs_without_label`` (predict, then measure): the share of the pairs in the chapter's pre-training
  batches in which the masking chose no token, so that the masked-LM loss learns nothing from them (each token is
  chosen on its own coin: short pairs often escape).
- ``14.bert_module`` (the build track's BERT) is the learner's ``BERT`` module, made of their embeddings, attention and
  LayerNorm of chapters 02-06, with post-norm blocks and the masked-LM head: it loads the chapter's pre-trained tiny
  BERT (renamed by :func:`tutorial_lib.build_track.my_bert_state_dict`) and must give its MLM logits and gradients.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.attention import padding_mask
from tutorial_lib.checks.ch04 import _mha_like
from tutorial_lib.checks.ch06 import _OwnLayerNorm
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.blocks import TransformerBlock
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
from tutorial_lib.checks.modules import build_module, first_module_that_differs, same_parameters
from tutorial_lib.embeddings import LearnedPositionalEmbedding, TokenEmbedding
from tutorial_lib.feed_forward import FeedForward
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.normalization import LayerNorm
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.data.dialogue import nsp_pairs
from tutorial_lib.models.bert import (
    BERT,
    IGNORE_INDEX,
    BERTConfig,
    BERTForPreTraining,
    BERTForSequenceClassification,
    mask_tokens,
    pretraining_loss,
)
from tutorial_lib.recipes.bert import ClassificationBatch, bert_pretraining_loss, classification_loss, fine_tune

# --- 14.mask_tokens -----------------------------------------------------------------------------------------------------

SPECIAL = [0, 1, 2, 3, 4]  # [PAD] [UNK] [CLS] [SEP] [MASK], as the chapter's tokenizer numbers them


def _pairs_of_tokens(generator: torch.Generator, batch: int, seq: int, d_vocab: int, n_pad: int) -> torch.Tensor:
    """``[CLS] A [SEP] B [SEP] [PAD]...`` rows of ordinary ids (5 and up)."""
    tokens = torch.randint(5, d_vocab, (batch, seq), generator=generator)
    tokens[:, 0] = 2
    tokens[:, seq // 2] = 3
    tokens[:, seq - n_pad - 1] = 3
    if n_pad:
        tokens[:, seq - n_pad :] = 0
    return tokens


def _mask_cases(generator: torch.Generator) -> list[Case]:
    odd_special = torch.randint(1, 11, (3, 10), generator=generator)
    odd_special[:, 0], odd_special[:, 5], odd_special[2, 8:] = 5, 5, 0
    return [
        Case.of(tokens=_pairs_of_tokens(generator, 2, 12, 20, 2), mask_id=4, d_vocab=20, special_ids=list(SPECIAL),
                generator=torch.Generator().manual_seed(0), p=0.15, note="a batch of two pairs with padding"),
        Case.of(tokens=_pairs_of_tokens(generator, 4, 24, 50, 3), mask_id=4, d_vocab=50, special_ids=list(SPECIAL),
                generator=torch.Generator().manual_seed(1), p=0.15),
        Case.of(tokens=_pairs_of_tokens(generator, 3, 16, 30, 0), mask_id=4, d_vocab=30, special_ids=list(SPECIAL),
                generator=torch.Generator().manual_seed(2), p=0.5, note="p = 0.5: many tokens chosen"),
        Case.of(tokens=odd_special, mask_id=11, d_vocab=12, special_ids=[0, 5, 11],
                generator=torch.Generator().manual_seed(3), p=0.6,
                note="special ids 0, 5 and 11, not the first ones; [MASK] is 11"),
        Case.of(tokens=torch.randint(5, 40, (20,), generator=generator), mask_id=4, d_vocab=40,
                special_ids=list(SPECIAL), generator=torch.Generator().manual_seed(4), p=0.3,
                note="one sequence, no batch axis"),
    ]


def _ordinary(d_vocab, special_ids):
    keep = torch.ones(d_vocab, dtype=torch.bool)
    keep[list(special_ids)] = False
    return keep, keep.nonzero().squeeze(1)


@mistake_builder
def _masking_like(*, exclude_special=True, on="chosen", mask_share=0.8, order="random_then_kept", draw_from="ordinary",
                  labels="chosen"):
    """A learner's mask_tokens; each keyword reproduces one way of getting it wrong."""

    def mask_tokens(tokens, mask_id, d_vocab, special_ids, generator, p=0.15):
        keep, ordinary_ids = _ordinary(d_vocab, special_ids)
        chosen = torch.rand(tokens.shape, generator=generator) < p
        if exclude_special:
            chosen = chosen & keep[tokens]
        action = torch.rand(tokens.shape, generator=generator)
        if draw_from == "ordinary":
            random_ids = ordinary_ids[torch.randint(len(ordinary_ids), tokens.shape, generator=generator)]
        else:  # the whole vocabulary, special ids included
            random_ids = torch.randint(d_vocab, tokens.shape, generator=generator)
        where = chosen if on == "chosen" else keep[tokens] if on == "ordinary" else torch.ones_like(chosen)
        to_mask = where & (action < mask_share)
        if order == "random_then_kept":
            to_random = where & (action >= mask_share) & (action < 0.9)
        else:  # kept from 0.8 to 0.9, random from 0.9
            to_random = where & (action >= 0.9)
        inputs = tokens.clone()
        inputs[to_mask] = mask_id
        inputs[to_random] = random_ids[to_random]
        if labels == "chosen":
            out = torch.where(chosen, tokens, IGNORE_INDEX)
        elif labels == "everywhere":
            out = tokens.clone()
        elif labels == "ordinary":
            out = torch.where(keep[tokens], tokens, IGNORE_INDEX)
        else:  # only where [MASK] was put
            out = torch.where(to_mask, tokens, IGNORE_INDEX)
        return inputs, out

    return mask_tokens


def _specials_assumed_first(tokens, mask_id, d_vocab, special_ids, generator, p=0.15):
    chosen = (torch.rand(tokens.shape, generator=generator) < p) & (tokens >= len(special_ids))
    action = torch.rand(tokens.shape, generator=generator)
    random_ids = torch.randint(len(special_ids), d_vocab, tokens.shape, generator=generator)
    inputs = torch.where(chosen & (action < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, tokens, IGNORE_INDEX)


def _chosen_above_p(tokens, mask_id, d_vocab, special_ids, generator, p=0.15):
    keep, ordinary_ids = _ordinary(d_vocab, special_ids)
    chosen = (torch.rand(tokens.shape, generator=generator) > p) & keep[tokens]
    action = torch.rand(tokens.shape, generator=generator)
    random_ids = ordinary_ids[torch.randint(len(ordinary_ids), tokens.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, tokens, IGNORE_INDEX)


def _masks_in_place(tokens, mask_id, d_vocab, special_ids, generator, p=0.15):
    inputs, labels = mask_tokens(tokens, mask_id, d_vocab, special_ids, generator, p)
    tokens.copy_(inputs)
    return tokens, labels


MASK_TOKENS = Exercise(
    id="14.mask_tokens",
    forbidden=(mask_tokens,),
    reference=lambda tokens, mask_id, d_vocab, special_ids, generator, p=0.15: mask_tokens(
        tokens, mask_id, d_vocab, special_ids, generator, p),
    cases=_mask_cases,
    points=2,
    outputs=("inputs", "labels"),
    checked=(
        "pairs with [CLS], [SEP] and padding at p = 0.15 and 0.5, special ids that are not the first ids, and one "
        "sequence without a batch axis: the same three draws from the generator, the same inputs and labels"
    ),
    mistakes=(
        Mistake("special_tokens_chosen", "let special tokens be chosen",
                "[CLS], [SEP] and [PAD] carry no word to predict, and [MASK] must not be masked again: chosen tokens "
                "are drawn among the ordinary ones only (clear `chosen` wherever the token is special).",
                (_masking_like(exclude_special=False),)),
        Mistake("random_from_whole_vocabulary", "drew the random replacements from the whole vocabulary, special "
                "tokens included",
                "A random replacement must look like text: draw an index into the ordinary ids and take the id "
                "there, never [CLS], [SEP], [PAD] or [MASK].", (_masking_like(draw_from="vocabulary"),)),
        Mistake("rule_applied_to_every_token", "applied the 80/10/10 rule to every token instead of the chosen 15%",
                "First choose 15% of the ordinary tokens; only those are replaced (80% by [MASK], 10% by a random "
                "token, 10% kept). The other 85% of the input is left as it is.",
                (_masking_like(on="ordinary"), _masking_like(on="everything"))),
        Mistake("labels_on_unchosen_positions", "kept labels on positions that were not chosen",
                "The model is scored only where a token was chosen: labels hold the original token there and -100 "
                "(ignored by the loss) everywhere else, or the loss rewards copying the 85% of words it can see.",
                (_masking_like(labels="everywhere"), _masking_like(labels="ordinary"))),
        Mistake("labels_only_at_mask", "put labels only where the input shows [MASK]",
                "The chosen tokens replaced by a random token or kept must be predicted too: that is what teaches the "
                "model to represent every word it sees, not only the [MASK]s.", (_masking_like(labels="masked"),)),
        Mistake("always_mask", "replaced every chosen token by [MASK]",
                "BERT's rule is 80/10/10: where 0.8 <= action < 0.9 the token becomes a random ordinary token, and "
                "from 0.9 it stays itself; with [MASK] only, the model never learns what to do with a real word.",
                (_masking_like(mask_share=1.0),)),
        Mistake("random_and_kept_swapped", "swapped the random and the kept ranges of `action`",
                "The rule reads the draw in this order: below 0.8 [MASK], from 0.8 to 0.9 a random token, from 0.9 "
                "the token kept.", (_masking_like(order="kept_then_random"),)),
    ),
    mutants=(
        Mutant("specials_assumed_first", "assumes the special ids are 0 … len(special_ids) − 1", _specials_assumed_first),
        Mutant("chosen_above_p", "chooses the tokens where rand > p, 85% of them", _chosen_above_p),
        Mutant("masks_in_place", "writes the masks into the caller's tokens", _masks_in_place),
    ),
)


# --- 14.mlm_loss ----------------------------------------------------------------------------------------------------------


def reference_mlm_loss(logits, targets, chosen):
    """The mean cross-entropy of the original tokens at the chosen positions (what `ignore_index` does)."""
    return F.cross_entropy(logits[chosen], targets[chosen])


def _loss_cases(generator: torch.Generator) -> list[Case]:
    def case(batch, seq, d_vocab, share, *, scale=2.0, dtype=torch.float32, empty_row=False, note=""):
        logits = scale * torch.randn(batch, seq, d_vocab, generator=generator, dtype=dtype)
        targets = torch.randint(d_vocab, (batch, seq), generator=generator)
        chosen = torch.rand(batch, seq, generator=generator) < share
        chosen[0, 0] = True
        if empty_row:
            chosen[-1] = False
        return Case.of(logits=logits, targets=targets, chosen=chosen, note=note)

    return [
        case(2, 8, 11, 0.3),
        case(3, 10, 25, 0.25, empty_row=True, note="a sequence with no chosen position"),
        case(2, 6, 7, 0.5, scale=80.0, note="large logits"),
        case(4, 5, 9, 0.4, dtype=torch.float64, note="float64"),
    ]


@mistake_builder
def _mlm_loss_like(*, positions="chosen", reduce="mean", log_probs="log_softmax"):
    """A learner's mlm_loss; each keyword reproduces one way of getting it wrong.

    ``positions``: "every" (all positions) or "unchosen" (the positions not chosen). ``reduce``: "mean_over_all"
    (the kept losses, the others zeroed, averaged over every position), "sum" or "per_sequence" (a mean within each
    sequence, then over the sequences). ``log_probs``: "log_of_softmax" (log and softmax in two steps) or
    "over_positions" (the log-softmax over the positions, dim=1).
    """

    def mlm_loss(logits, targets, chosen):
        kept = {"chosen": chosen, "every": torch.ones_like(chosen), "unchosen": ~chosen}[positions]
        # A mean or a sum of the kept positions' losses keeps their logits first (`logits[chosen]`), as the reference
        # does; a mask multiplies the losses of every position, and a softmax over the positions needs all of them.
        selected_first = reduce in ("mean", "sum") and log_probs != "over_positions"
        if selected_first:
            logits, targets = logits[kept], targets[kept]
        dim = 1 if log_probs == "over_positions" else -1
        if log_probs == "log_of_softmax":  # the target's probability, then its log
            losses = -torch.log(torch.softmax(logits, dim=dim).gather(-1, targets[..., None]).squeeze(-1))
        else:
            losses = -torch.log_softmax(logits, dim=dim).gather(-1, targets[..., None]).squeeze(-1)
        if reduce in ("mean", "sum"):
            losses = losses if selected_first else losses[kept]
            return losses.mean() if reduce == "mean" else losses.sum()
        if reduce == "mean_over_all":
            return (losses * kept).mean()
        return ((losses * kept).sum(dim=1) / kept.sum(dim=1)).mean()

    return mlm_loss


def _label_smoothing(logits, targets, chosen):
    return F.cross_entropy(logits[chosen], targets[chosen], label_smoothing=0.1)


def _probabilities(logits, targets, chosen):
    return -torch.softmax(logits[chosen], dim=-1).gather(-1, targets[chosen][:, None]).mean()


def _max_over_positions(logits, targets, chosen):
    return F.cross_entropy(logits[chosen], targets[chosen], reduction="none").max()


MLM_LOSS = Exercise(
    id="14.mlm_loss",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(pretraining_loss, bert_pretraining_loss),
    reference=reference_mlm_loss,
    cases=_loss_cases,
    points=1,
    outputs=("the loss",),
    checked=(
        "batches of 2 to 4 sequences with a quarter to a half of the positions chosen, a sequence with none, "
        "logits large enough to underflow a softmax, and float64"
    ),
    mistakes=(
        Mistake("every_position", "averaged the loss over every position",
                "Only the chosen positions are predictions: the 85% of words the model can see would teach it to copy "
                "its input. Keep the logits and the targets at the chosen positions only.",
                (_mlm_loss_like(positions="every"),)),
        Mistake("unchosen_counted_as_zero", "zeroed the unchosen positions and averaged over all of them",
                "Multiplying by the mask is right, but then divide by the number of chosen positions "
                "(`chosen.sum()`), not by every position: a mean over all of them shrinks the loss by the share "
                "chosen.", (_mlm_loss_like(reduce="mean_over_all"),)),
        Mistake("summed", "summed the chosen positions' losses instead of averaging them",
                "Average over the chosen positions (`.mean()`, or divide by `chosen.sum()`): a sum grows with the "
                "batch and the learning rate would have to follow it.", (_mlm_loss_like(reduce="sum"),)),
        Mistake("unchosen_positions", "took the positions that were not chosen",
                "`chosen` is True where a token was chosen for prediction: keep the logits where it is True, not "
                "where it is False.",
                (_mlm_loss_like(positions="unchosen"),)),
        Mistake("mean_per_sequence", "averaged within each sequence, then over the sequences",
                "Every chosen position weighs the same, whichever sequence it is in: one mean over all of them. Per "
                "sequence, a sequence with no chosen position divides 0 by 0.",
                (_mlm_loss_like(reduce="per_sequence"),)),
        Mistake("log_of_softmax", "took the log of the softmax in two steps",
                "softmax rounds tiny probabilities to 0 and log(0) = -inf: use `torch.log_softmax` (or "
                "`F.cross_entropy`), which subtracts the log-sum-exp without leaving log space.",
                (_mlm_loss_like(log_probs="log_of_softmax"),)),
        Mistake("softmax_over_positions", "took the softmax over the positions instead of the vocabulary",
                "Each position's logits are a distribution over the d_vocab tokens: softmax over the last axis "
                "(`dim=-1`).", (_mlm_loss_like(log_probs="over_positions"),)),
    ),
    mutants=(
        Mutant("label_smoothing", "adds label smoothing 0.1", _label_smoothing),
        Mutant("probabilities", "averages minus the probabilities instead of their logs", _probabilities),
        Mutant("max_over_positions", "takes the largest loss instead of the mean", _max_over_positions),
    ),
)


# --- 14.nsp_pairs -------------------------------------------------------------------------------------------------------

_LINES = [
    "Before we proceed any further, hear me speak.",
    "Speak, speak.",
    "You are all resolved rather to die than to famish?",
    "Resolved. resolved.",
    "First, you know Caius Marcius is chief enemy to the people.",
    "We know't, we know't.",
    "Let us kill him, and we'll have corn at our own price.",
    "Is't a verdict?",
    "No more talking on't; let it be done: away, away!",
    "One word, good citizens.",
    "We are accounted poor citizens, the patricians good.",
]


def _pair_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(lines=_LINES[:6], generator=torch.Generator().manual_seed(0)),
        Case.of(lines=list(_LINES), generator=torch.Generator().manual_seed(1)),
        Case.of(lines=_LINES[4:7], generator=torch.Generator().manual_seed(2), note="three lines, the fewest allowed"),
        Case.of(lines=_LINES[2:10], generator=torch.Generator().manual_seed(5)),
    ]


@mistake_builder
def _pairs_like(*, random_when="above", draw="skip", labels=(0, 1), order="a_first", last="stop"):
    """A learner's nsp_pairs; each keyword reproduces one way of getting it wrong."""

    def nsp_pairs(lines, generator):
        n = len(lines)
        count = n if last == "wrap" else n - 1
        coins = torch.rand(count, generator=generator)
        high = n if draw == "any" else n - 2
        others = torch.randint(high, (count,), generator=generator)
        pairs = []
        for i in range(count):
            random_next = coins[i] >= 0.5 if random_when == "above" else coins[i] < 0.5
            if random_next:
                j = int(others[i])
                if draw == "skip" and j >= i:
                    j += 2
                pair = (lines[i], lines[j], labels[1]) if order == "a_first" else (lines[j], lines[i], labels[1])
            else:
                pair = (lines[i], lines[(i + 1) % n], labels[0])
            pairs.append(pair)
        return pairs

    return nsp_pairs


def _skips_only_a(lines, generator):
    n = len(lines)
    coins = torch.rand(n - 1, generator=generator)
    others = torch.randint(n - 1, (n - 1,), generator=generator)
    pairs = []
    for i in range(n - 1):
        if coins[i] >= 0.5:
            j = int(others[i])
            pairs.append((lines[i], lines[j + 1 if j >= i else j], 1))
        else:
            pairs.append((lines[i], lines[i + 1], 0))
    return pairs


def _draws_pair_by_pair(lines, generator):
    n = len(lines)
    pairs = []
    for i in range(n - 1):
        coin = torch.rand((), generator=generator)
        j = int(torch.randint(n - 2, (), generator=generator))
        pairs.append((lines[i], lines[j + 2 if j >= i else j], 1) if coin >= 0.5 else (lines[i], lines[i + 1], 0))
    return pairs


def _one_coin(lines, generator):
    n = len(lines)
    coin = torch.rand((), generator=generator)
    others = torch.randint(n - 2, (n - 1,), generator=generator)
    return [(lines[i], lines[int(j) + 2 if j >= i else int(j)], 1) if coin >= 0.5 else (lines[i], lines[i + 1], 0)
            for i, j in enumerate(others.tolist())]


NSP_PAIRS = Exercise(
    id="14.nsp_pairs",
    reference=nsp_pairs,
    cases=_pair_cases,
    points=1,
    outputs=("the pairs",),
    checked="lists of 3 to 11 lines: one pair per line that has a next line, the same coins and random lines",
    mistakes=(
        Mistake("labels_swapped", "labelled the true next line 1 and the random line 0",
                "Hugging Face's BertForPreTraining (and the package) use 0 = IsNext (B follows A), 1 = NotNext.",
                (_pairs_like(labels=(1, 0)),)),
        Mistake("random_index_not_moved", "used the random index as it was drawn, without moving it past A and its "
                "next line",
                "The draw among n − 2 lines stands for the lines other than A and its next line. Map it onto them: "
                "move a draw at or past i on by 2, so that a 'random' B is never A itself or the true next "
                "line (which would be labelled NotNext while it follows A).", (_pairs_like(draw="raw"),)),
        Mistake("random_from_every_line", "drew the random line among all n lines",
                "A random line drawn among all the lines can be A itself or the line that follows it, and that pair "
                "would be labelled NotNext: draw among the n − 2 others, then move a draw at or past i on by 2.",
                (_pairs_like(draw="any"),)),
        Mistake("pair_for_the_last_line", "made a pair for the last line too, wrapping round to the first line",
                "The last line has no next line: there are n − 1 pairs, for i in range(n − 1), and n − 1 coins.",
                (_pairs_like(last="wrap"),)),
        Mistake("coin_reversed", "took the random line when the coin is below 0.5",
                "The coin reads the other way: below 0.5 B is the line that follows, from 0.5 on B is random.",
                (_pairs_like(random_when="below"),)),
        Mistake("random_line_first", "put the random line before A",
                "A stays segment A in every pair: (lines[i], lines[j], 1); only B changes.",
                (_pairs_like(order="random_first"),)),
    ),
    mutants=(
        Mutant("skips_only_a", "draws among n − 1 lines and moves past A only, so B may be the true next line",
               _skips_only_a),
        Mutant("draws_pair_by_pair", "draws a coin and an index for each pair in turn, not all the coins first",
               _draws_pair_by_pair),
        Mutant("one_coin", "tosses one coin for the whole list", _one_coin),
    ),
)

# --- 14.fine_tune_step (build) ------------------------------------------------------------------------------------------
# One step of fine-tuning, composed from the chapter's pieces: the padding mask from the lengths, the classifier on
# tokens and segments, the cross-entropy of the labels, and the optimizer's zero_grad / backward / step in that order.

_BERT_TINY = BERTConfig(d_vocab=20, n_ctx=12, d_model=16, n_heads=2, n_layers=1, dropout=0.0)
_SGD_LR = 0.5


@dataclass(frozen=True)
class _Classifier:
    """How a case builds its model and optimizer: a fresh seeded float64 classifier and plain SGD per call."""

    description: str
    n_classes: int = 2
    seed: int = 0
    stale_gradients: bool = False  # hand it over holding the gradients of an earlier batch

    def build(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = BERTForSequenceClassification(_BERT_TINY, self.n_classes).double()
            with torch.no_grad():  # weights far from BERT's tiny initialisation, so that every mistake shows
                for parameter in model.parameters():
                    parameter.normal_(0.0, 0.5)
        optimizer = torch.optim.SGD(model.parameters(), lr=_SGD_LR)
        if self.stale_gradients:
            other = torch.randint(5, _BERT_TINY.d_vocab, (2, 6), generator=torch.Generator().manual_seed(99))
            model(other).sum().backward()
        return model, optimizer

    def __repr__(self) -> str:
        return f"<{self.description}>"


@dataclass(frozen=True)
class _Batch:
    """A padded batch of pairs, handed to the answer as a ClassificationBatch; verdicts show the description."""

    description: str
    tokens: torch.Tensor
    segments: torch.Tensor
    lengths: torch.Tensor
    labels: torch.Tensor

    def build(self) -> ClassificationBatch:
        return ClassificationBatch(self.tokens.clone(), self.segments.clone(), self.lengths.clone(), self.labels.clone())

    def __repr__(self) -> str:
        return f"<{self.description}>"


def _step_call(obj, args) -> tuple[torch.Tensor, torch.Tensor]:
    spec, batch_spec = args
    model, optimizer = spec.build()
    batch = batch_spec.build()
    loss = obj(model, batch, optimizer)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        loss = loss.detach().reshape(())
    elif isinstance(loss, numbers.Real) and not isinstance(loss, bool):
        loss = torch.tensor(float(loss), dtype=torch.float64)
    else:
        raise WrongOutput("wrong_type", f"fine_tune_step should return the batch's loss (a number or a one-element "
                                        f"tensor), got a value of type {type(loss).__name__}")
    model.eval()
    with torch.no_grad():
        after = model(batch.tokens, batch.segments, mask=padding_mask(batch.lengths, batch.tokens.shape[1]))
    return loss.to(torch.float64), after


def _classification_batch(generator: torch.Generator, lengths: list[int], n_classes: int) -> _Batch:
    """[CLS] A [SEP] B [SEP] rows of the given lengths, padded with 0 to the longest; segment 1 from the middle on."""
    seq = max(lengths)
    tokens = torch.zeros(len(lengths), seq, dtype=torch.long)
    segments = torch.zeros(len(lengths), seq, dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(5, _BERT_TINY.d_vocab, (n,), generator=generator)
        tokens[row, 0], tokens[row, n // 2], tokens[row, n - 1] = 2, 3, 3  # [CLS], the two [SEP]s
        segments[row, n // 2 + 1 : n] = 1
    labels = torch.randint(n_classes, (len(lengths),), generator=generator)
    shown = f"{len(lengths)} pairs of {', '.join(map(str, lengths))} tokens, padded to {seq}"
    return _Batch(shown, tokens, segments, torch.tensor(lengths), labels)


def _step_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(model=_Classifier("a fresh two-class classifier"), batch=_classification_batch(generator, [8, 5, 6, 4], 2)),
        Case.of(model=_Classifier("a three-class classifier holding the gradients of an earlier batch", 3, seed=1,
                                  stale_gradients=True), batch=_classification_batch(generator, [7, 7, 4], 3)),
        Case.of(model=_Classifier("a two-class classifier holding old gradients", seed=2, stale_gradients=True),
                batch=_classification_batch(generator, [10, 6], 2)),
    ]


def reference_fine_tune_step(model, batch, optimizer):
    """One update with the package's :func:`tutorial_lib.recipes.bert.classification_loss`; returns the loss."""
    optimizer.zero_grad()
    loss = classification_loss(model, batch)
    loss.backward()
    optimizer.step()
    return loss.item()


@mistake_builder
def _step_like(*, zero_grad="first", mask=True, segments=True, order="backward_then_step", reduction="mean"):
    """A learner's fine-tuning step; each keyword reproduces one way of getting it wrong."""

    def fine_tune_step(model, batch, optimizer):
        if zero_grad == "first":
            optimizer.zero_grad()
        seq = batch.tokens.shape[1]
        attend = padding_mask(batch.lengths, seq) if mask else None
        logits = model(batch.tokens, batch.segments if segments else None, mask=attend)
        loss = F.cross_entropy(logits, batch.labels, reduction=reduction)
        if order == "step_then_backward":
            optimizer.step()
            loss.backward()
        else:
            loss.backward()
            if zero_grad == "between":
                optimizer.zero_grad()
            optimizer.step()
        return loss.item()

    return fine_tune_step


def _step_twice(model, batch, optimizer):
    loss = reference_fine_tune_step(model, batch, optimizer)
    optimizer.step()
    return loss


def _loss_after_step(model, batch, optimizer):
    reference_fine_tune_step(model, batch, optimizer)
    with torch.no_grad():
        return classification_loss(model, batch).item()


def _first_row_only(model, batch, optimizer):
    optimizer.zero_grad()
    loss = classification_loss(model, batch[torch.tensor([0])])
    loss.backward()
    optimizer.step()
    return loss.item()


FINE_TUNE_STEP = Exercise(
    id="14.fine_tune_step",
    forbidden=(fine_tune,),
    reference=reference_fine_tune_step,
    cases=_step_cases,
    points=3,
    call=_step_call,
    outputs=("the loss", "the logits after the step"),
    axes={"the logits after the step": "batch n_classes"},
    checked=(
        "tiny float64 BERT classifiers of two and three classes, two of them holding the gradients of an earlier "
        "batch, on padded batches of pairs, with SGD: the same loss and the same logits after the step"
    ),
    mistakes=(
        Mistake("gradients_not_cleared", "kept the gradients the model already held, so the old ones were added to "
                "this batch's",
                "`backward()` adds to `.grad`: call `optimizer.zero_grad()` first, since a model handed over after a "
                "step (or a probe) still holds its gradients.", (_step_like(zero_grad="never"),)),
        Mistake("padding_not_masked", "let every token attend to the padding",
                "The shorter pairs are padded to the batch's longest: pass a `mask` built by `padding_mask` from "
                "`batch.lengths`, so that no token, [CLS] included, reads the padding.", (_step_like(mask=False),)),
        Mistake("segments_left_out", "left out the segment ids, so that every token is in sentence A",
                "BERT adds a segment embedding that tells A from B: pass `batch.segments` as the second argument.",
                (_step_like(segments=False),)),
        Mistake("step_without_gradients", "stepped before this batch's gradients were there",
                "The order is zero_grad, forward, `loss.backward()`, then `optimizer.step()`: a step before the "
                "backward (or after clearing the gradients again) updates nothing with this batch.",
                (_step_like(order="step_then_backward"), _step_like(zero_grad="between"))),
        Mistake("summed_loss", "summed the pairs' losses instead of averaging them",
                "`F.cross_entropy` averages over the batch by default; `reduction='sum'` multiplies the gradient, "
                "hence the step, by the batch size.", (_step_like(reduction="sum"),)),
    ),
    mutants=(
        Mutant("step_twice", "calls optimizer.step() twice", _step_twice),
        Mutant("loss_after_step", "returns the loss measured after the step", _loss_after_step),
        Mutant("first_row_only", "trains on the first pair of the batch only", _first_row_only),
    ),
)


# --- 14.predict_mask_share (predict, then measure) --------------------------------------------------------------------


def mask_share(n_tokens: int = 65536, d_vocab: int = 1000, seed: int = 0) -> float:
    """The share of ordinary tokens that :func:`~tutorial_lib.models.bert.mask_tokens` turns into [MASK], measured on
    ``n_tokens`` random ordinary tokens (ids 4 and up; 0 to 3 special, [MASK] = 3) with a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, d_vocab, (n_tokens,), generator=generator)
    inputs, _ = mask_tokens(tokens, 3, d_vocab, [0, 1, 2, 3], generator)
    return (inputs == 3).double().mean().item()


PREDICT_MASK_SHARE = predict_number(
    "14.predict_mask_share",
    measure=mask_share,
    question="the share of tokens seen as [MASK]",
    within=1.15,
    points=1,
    misconceptions=[
        Misconception("every_chosen_masked", 0.15,
                      "expected every chosen token (15%) to become [MASK]",
                      "Only 80% of the chosen tokens become [MASK]; 10% become a random token and 10% stay as they are, "
                      "so the encoder cannot assume that a visible token is right: 0.15 × 0.8."),
        Misconception("eighty_percent_of_all", 0.8,
                      "applied the 80% to every token instead of the chosen 15%",
                      "The 80/10/10 rule applies to the chosen tokens only; the others are left as they are."),
        Misconception("random_share", 0.015,
                      "gave the share of random replacements (10% of 15%)",
                      "[MASK] is the 80% branch of the chosen 15%; the 10% branches are the random and the kept tokens."),
        Misconception("unchosen_share", 0.85,
                      "gave the share of tokens that are not chosen",
                      "85% of the tokens are left alone; [MASK] appears at 80% of the other 15%."),
    ],
    mutants=[
        wrong_prediction("half", 0.5, "four times too large, no misconception's value"),
        wrong_prediction("one_in_a_thousand", 0.001, "a hundred times too small, no misconception's value"),
    ],
)


# --- 14.predict_pairs_without_label (predict, then measure) ---------------------------------------------------------

PAIRS_BATCHES = 40  # the chapter's first 40 pre-training batches of 64 pairs: 2,560 pairs


def pairs_without_label_share(n_batches: int = PAIRS_BATCHES, seed: int = 0) -> float:
    """The share of the pairs in the chapter's pre-training batches (:func:`~tutorial_lib.recipes.bert.pretraining_batches`
    on its training speeches, ``BERT_BATCH_SIZE`` pairs of at most ``n_ctx`` tokens, a generator seeded with ``seed``)
    in which the masking chose no token at all, so that the masked-LM loss learns nothing from them."""
    from tutorial_lib.recipes.bert import BERT_BATCH_SIZE, TINY_BERT_CONFIG, load_script_data, pretraining_batches

    data = load_script_data()  # the corpus, loaded only when the measurement is made
    next_batch = pretraining_batches(data.train_lines, data.tokenizer, batch_size=BERT_BATCH_SIZE,
                                     n_ctx=TINY_BERT_CONFIG.n_ctx, generator=torch.Generator().manual_seed(seed))
    labelled_per_pair = torch.cat([(next_batch().labels != IGNORE_INDEX).sum(dim=1) for _ in range(n_batches)])
    return (labelled_per_pair == 0).double().mean().item()


PREDICT_PAIRS_WITHOUT_LABEL = predict_number(
    "14.predict_pairs_without_label",
    measure=pairs_without_label_share,
    question="the share of pairs in which no token is chosen",
    within=1.5,
    points=1,
    misconceptions=[
        Misconception("every_pair_labelled", 0.0,
                      "expected every pair to get some labels, as if 15% of each pair's tokens were chosen",
                      "Each token is chosen on its own coin, with no quota per pair: a short pair can come out with "
                      "no chosen token at all, and the loss then learns nothing from it."),
        Misconception("one_token_unchosen", 0.85,
                      "gave the chance that a single token is not chosen",
                      "A pair is left without a label only when every one of its ordinary tokens escapes the draw; "
                      "that is much rarer than one token escaping it."),
        Misconception("special_tokens_counted", 0.049,
                      "counted [CLS] and the two [SEP] as tokens that can be chosen",
                      "The special tokens are never chosen: only the ordinary words of the pair take part in the "
                      "draw, so fewer chances, and more pairs with none chosen."),
        Misconception("padding_counted", 0.0004,
                      "counted every position up to the context length, padding included, as a chance to be chosen",
                      "Padding and special tokens are never chosen: count the words of the pair itself, which are "
                      "far fewer than the context length."),
    ],
    mutants=[
        wrong_prediction("half", 0.5, "about five times too large, no misconception's value"),
        wrong_prediction("one_in_a_hundred", 0.01, "ten times too small, no misconception's value"),
    ],
)


# --- 14.bert_module (the build track's BERT: the learner's modules, the book's pre-trained weights) --------------------


def _erf_gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


class _BookPostNormBlock(nn.Module):
    """The package's post-norm block (chapter 07's, BERT's) under the build track's names: ``ln_1`` after attention,
    ``ln_2`` after the FFN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, eps: float) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln_1 = LayerNorm(d_model, eps)
        self.ffn = FeedForward(d_model, d_ff, activation="gelu")
        self.ln_2 = LayerNorm(d_model, eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.ln_1(x + self.attn(x, mask=mask))
        return self.ln_2(x + self.ffn(x))


class BookBERT(nn.Module):
    """The package's BERT with its masked-LM head, under the build track's names (:func:`tutorial_lib.build_track.
    my_bert_state_dict` renames the book's weights to them): equal to ``BERTForPreTraining``'s MLM logits (tested)."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 n_segments: int = 2, eps: float = 1e-12) -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.embed = TokenEmbedding(d_vocab, d_model)
        self.pos_embed = LearnedPositionalEmbedding(n_ctx, d_model)
        self.segment_embed = nn.Embedding(n_segments, d_model)
        self.ln_embed = LayerNorm(d_model, eps)
        self.blocks = nn.ModuleList(_BookPostNormBlock(d_model, n_heads, d_ff, eps) for _ in range(n_layers))
        self.mlm_dense = nn.Linear(d_model, d_model)
        self.mlm_norm = LayerNorm(d_model, eps)
        self.mlm_bias = nn.Parameter(torch.zeros(d_vocab))

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor | None = None, mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"tokens has {seq} positions, more than n_ctx={self.n_ctx}")
        if segments is None:
            segments = torch.zeros_like(tokens)
        x = self.ln_embed(self.embed(tokens) + self.pos_embed(seq) + self.segment_embed(segments))
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.mlm_norm(_erf_gelu(self.mlm_dense(x))) @ self.embed.weight.T + self.mlm_bias


@dataclass(frozen=True)
class BERTSizes:
    """The arguments of the learner's ``BERT(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, n_segments, eps)``."""

    d_vocab: int
    n_ctx: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int
    n_segments: int = 2
    eps: float = 1e-12

    def args(self) -> tuple:
        return (self.d_vocab, self.n_ctx, self.d_model, self.n_heads, self.n_layers, self.d_ff, self.n_segments, self.eps)

    def __repr__(self) -> str:
        return f"BERT{self.args()}"


SMALL_BERT = BERTSizes(d_vocab=13, n_ctx=8, d_model=16, n_heads=2, n_layers=2, d_ff=32)
BERT_SIGNATURE = "BERT(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, n_segments, eps)"


def _random_bert_weights(sizes: BERTSizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Every parameter drawn afresh, the norms' scales around 1."""
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in BookBERT(*sizes.args()).state_dict().items()}
    return {name: (1.0 if name.endswith("weight") and ("ln_" in name or "norm" in name) else 0.0)
            + 0.3 * torch.randn(shape, generator=generator) for name, shape in shapes.items()}


@functools.lru_cache(maxsize=1)
def book_tiny_bert_case() -> tuple[BERTSizes, dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
    """Chapter 14's pre-trained tiny BERT (the recipe's, from the cache or trained once), its weights in the build
    track's names, and the first 4 pairs of the chapter's validation batches: masked tokens, segments, padding mask."""
    from tutorial_lib.build_track import my_bert_state_dict
    from tutorial_lib.recipes.bert import evaluation_batches, load_or_train_tiny_bert, load_script_data

    data = load_script_data()
    book, _ = load_or_train_tiny_bert(data, progress=False)
    cfg = book.cfg
    sizes = BERTSizes(cfg.d_vocab, cfg.n_ctx, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.n_segments, cfg.eps)
    weights = {name: t.detach().clone() for name, t in my_bert_state_dict(book.state_dict()).items()}
    batch = evaluation_batches(data.val_lines[:40], data.tokenizer, n_ctx=cfg.n_ctx)[0]
    inputs, segments, lengths = batch.inputs[:4], batch.segments[:4], batch.lengths[:4]
    return sizes, weights, (inputs, segments, padding_mask(lengths, inputs.shape[1]))


def _bert_module_cases(generator: torch.Generator) -> list[Case]:
    book_sizes, book_weights, (book_tokens, book_segments, book_mask) = book_tiny_bert_case()
    lengths = torch.tensor([8, 5, 3])
    return [
        Case.of(sizes=SMALL_BERT, weights=_random_bert_weights(SMALL_BERT, generator),
                tokens=torch.randint(0, 13, (2, 8), generator=generator),
                segments=torch.tensor([[0] * 4 + [1] * 4, [0] * 6 + [1] * 2]), mask=None,
                note="every weight random, sentences A and B, no padding"),
        Case.of(sizes=SMALL_BERT, weights=_random_bert_weights(SMALL_BERT, generator),
                tokens=torch.randint(0, 13, (3, 8), generator=generator),
                segments=(torch.arange(8) >= (lengths // 2)[:, None]).long(), mask=padding_mask(lengths, 8),
                note="three pairs padded to 8 positions, with their padding mask"),
        Case.of(sizes=SMALL_BERT, weights=_random_bert_weights(SMALL_BERT, generator),
                tokens=torch.randint(0, 13, (1, 9), generator=generator), segments=None, mask=None,
                note="9 positions for n_ctx = 8: a ValueError"),
        Case.of(sizes=book_sizes, weights={name: t.double() for name, t in book_weights.items()},
                tokens=book_tokens.clone(), segments=book_segments.clone(),
                mask=book_mask.clone(), note="chapter 14's pre-trained BERT, in float64, on 4 masked validation pairs"),
    ]


def _bert_module_call(cls, args):
    sizes, weights, tokens, segments, mask = args
    module = build_module(cls, sizes.args(), BERT_SIGNATURE)
    same_parameters(module, weights, BERT_SIGNATURE)
    return torch.func.functional_call(module.eval(), weights, (tokens, segments), {"mask": mask}, strict=True)


def locate_first_bert_difference(cls, args) -> str | None:
    sizes, weights, tokens, segments, mask = args
    return first_module_that_differs(build_module(cls, sizes.args(), "BERT"), BookBERT(*sizes.args()), weights,
                                     (tokens, segments), {"mask": mask})


@mistake_builder
def _bert_module_like(*, placement="post", embedding_norm=True, segments_used=True, gelu="erf", use_mask=True,
                      norm_eps=None, head="transform", causal=False):
    """A learner's BERT made of a learner's parts; each keyword reproduces one way of getting it wrong."""
    def activation(x):
        if gelu == "erf":
            return _erf_gelu(x)
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    class FFN(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

        def forward(self, x):
            return self.down(activation(self.up(x)))

    class Block(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, eps):
            super().__init__()
            eps = norm_eps or eps
            self.attn, self.ln_1 = _mha_like()(d_model, n_heads), _OwnLayerNorm(d_model, eps)
            self.ffn, self.ln_2 = FFN(d_model, d_ff), _OwnLayerNorm(d_model, eps)

        def forward(self, x, mask=None):
            seq = x.shape[1]
            if causal:
                tril = torch.ones(seq, seq, dtype=torch.bool).tril()
                mask = tril if mask is None else mask & tril
            mask = mask if use_mask else None
            if placement == "pre":
                x = x + self.attn(self.ln_1(x), mask=mask)
                return x + self.ffn(self.ln_2(x))
            x = self.ln_1(x + self.attn(x, mask=mask))
            return self.ln_2(x + self.ffn(x))

    class MyBERT(nn.Module):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, n_segments=2, eps=1e-12):
            super().__init__()
            self.n_ctx = n_ctx
            self.embed = nn.Embedding(d_vocab, d_model)
            self.pos_embed = nn.Embedding(n_ctx, d_model)
            self.segment_embed = nn.Embedding(n_segments, d_model)
            self.ln_embed = _OwnLayerNorm(d_model, norm_eps or eps)
            self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff, eps) for _ in range(n_layers))
            self.mlm_dense = nn.Linear(d_model, d_model)
            self.mlm_norm = _OwnLayerNorm(d_model, norm_eps or eps)
            self.mlm_bias = nn.Parameter(torch.zeros(d_vocab))

        def forward(self, tokens, segments=None, mask=None):
            seq = tokens.shape[1]
            if seq > self.n_ctx:
                raise ValueError(f"{seq} positions, more than n_ctx={self.n_ctx}")
            x = self.embed(tokens) + self.pos_embed.weight[:seq]
            if segments_used and segments is not None:
                x = x + self.segment_embed(segments)
            elif segments_used:
                x = x + self.segment_embed.weight[0]
            if embedding_norm:
                x = self.ln_embed(x)
            for block in self.blocks:
                x = block(x, mask=mask)
            if head == "transform":
                x = self.mlm_norm(activation(self.mlm_dense(x)))
            elif head == "no_gelu":
                x = self.mlm_norm(self.mlm_dense(x))
            return x @ self.embed.weight.T + self.mlm_bias

    return MyBERT


class _PositionsFromOne(_bert_module_like()):
    def forward(self, tokens, segments=None, mask=None):
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"{seq} positions, more than n_ctx={self.n_ctx}")
        x = self.embed(tokens) + self.pos_embed.weight[1 : seq + 1].roll(1, dims=0)
        x = self.ln_embed(x + self.segment_embed(segments if segments is not None else torch.zeros_like(tokens)))
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.mlm_norm(_erf_gelu(self.mlm_dense(x))) @ self.embed.weight.T + self.mlm_bias


BERT_MODULE = Exercise(
    id="14.bert_module",
    gradients=True,  # pre-trained in the chapter: a detached or no_grad path must not pass
    # the package's models and torch's ready-made layers are not the learner's; their own modules of chapters 02-06 are
    forbidden=(BERT, BERTForPreTraining, BookBERT, TransformerBlock, MultiHeadAttention, FeedForward, LayerNorm,
               nn.LayerNorm, F.layer_norm, nn.MultiheadAttention, F.scaled_dot_product_attention,
               nn.TransformerEncoderLayer, nn.TransformerEncoder, F.gelu, nn.GELU),
    reference=BookBERT,
    call=_bert_module_call,
    localize=locate_first_bert_difference,
    cases=_bert_module_cases,
    points=4,
    outputs=("the masked-LM logits",),
    checked=(
        "BERTs with every weight random (sentence pairs with and without padding, 9 positions for n_ctx = 8: a "
        "ValueError), and chapter 14's pre-trained BERT, its weights put in your layers by name (in float64), on 4 "
        "masked validation pairs: the masked-LM logits and the gradients of every weight equal to the book's model's"
    ),
    mistakes=(
        Mistake("pre_norm_blocks", "normalised before each sublayer, as GPT does, instead of after the residual sum",
                "BERT keeps the paper's post-norm: add each sublayer's output to its input first, then normalise "
                "the sum.", (_bert_module_like(placement="pre"),)),
        Mistake("no_embedding_norm", "left out the LayerNorm of the embeddings",
                "Post-norm blocks expect a normalised input: BERT normalises the sum of the three embeddings once, "
                "with `ln_embed`, before the first block.", (_bert_module_like(embedding_norm=False),)),
        Mistake("no_segments", "left out the segment embeddings",
                "Each token also gets the row of `segment_embed` for its sentence (0 for A, 1 for B; all 0 when no "
                "segments are given).", (_bert_module_like(segments_used=False),)),
        Mistake("tanh_gelu", "used GPT-2's tanh approximation of GELU instead of the exact one",
                "BERT's GELU is x · Φ(x) with Φ the normal CDF, 0.5 · x · (1 + erf(x / √2)); the tanh form differs "
                "by up to 3e-4, which the trained model's logits show.", (_bert_module_like(gelu="tanh"),)),
        Mistake("mask_ignored", "did not pass the padding mask to attention",
                "Hand `mask` to every block's attention, so that no token reads the padding of its row.",
                (_bert_module_like(use_mask=False),)),
        Mistake("default_eps", "gave the LayerNorms PyTorch's default ε, 1e-5, instead of `eps`",
                "BERT's norms use ε = 1e-12 (the `eps` argument): pass it to every LayerNorm.",
                (_bert_module_like(norm_eps=1e-5),)),
        Mistake("no_head_transform", "unembedded the final states directly, without the head's dense layer, GELU "
                "and LayerNorm", "The masked-LM head transforms each final state first: its dense layer, then the GELU, "
                "then its LayerNorm; only then the tied unembedding and `mlm_bias`.",
                (_bert_module_like(head="none"),)),
    ),
    mutants=(
        Mutant("causal_mask", "adds GPT's causal mask, so that no token reads the tokens after it",
               _bert_module_like(causal=True)),
        Mutant("head_without_gelu", "leaves the GELU out of the masked-LM head", _bert_module_like(head="no_gelu")),
        Mutant("positions_shifted", "takes each position's row from the next one", _PositionsFromOne),
    ),
)


register(MASK_TOKENS, PREDICT_MASK_SHARE, MLM_LOSS, NSP_PAIRS, FINE_TUNE_STEP, PREDICT_PAIRS_WITHOUT_LABEL, BERT_MODULE)
