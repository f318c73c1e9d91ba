"""Chapter 14's runs: a tiny BERT pre-trained on tiny Shakespeare (trained once and cached, like chapter 09's GPT),
then fine-tuned on a task derived from the corpus, beside a bag-of-words logistic regression.

**Pre-training.** The text is the plays' lines as printed (:func:`~tutorial_lib.data.dialogue.script_lines`: each
speech's heading such as ``"ROMEO:"``, then its lines), split by speeches: the first 90% train, the last 10% (later
plays) evaluate. Words and punctuation marks are tokens (:class:`~tutorial_lib.data.dialogue.WordTokenizer`, the
words seen at least 3 times in the training lines). Each pass over the training lines draws new next-sentence pairs
(:func:`~tutorial_lib.data.dialogue.nsp_pairs`) in a new order, and every batch new masks (:func:`mask_tokens`:
RoBERTa's dynamic masking; BERT masked its data offline, each sequence in 10 ways: RoBERTa's paper, §4.1).

The recipe was chosen by MLM accuracy at the masked positions of the evaluation lines after about 80 s of training on
the 2-core machine (AMD EPYC, 2 threads), most frequent token 8.6%:

* d_model 128, 2 layers, batch 128, lr 1e-3, 600 updates (88 s): 12.4%, and NSP 50.9% on dialogue lines only
  (speakers' headings left out); lr 2e-3: about the same; lr 4e-3: stuck at the most frequent token;
* the same pairs made of whole speeches, or of two lines each: NSP 54-56%, MLM no better;
* d_model 64, 4 layers, batch 64, lr 3e-3, 1,500 updates: 16.6-17.4% over three seeds (lr 2e-3: 15.6-16.0%), NSP
  still at chance on dialogue lines; with the headings kept as lines (this recipe): 18.4% and 19.3%, NSP 68-70%
  (two seeds). The headings give next-sentence prediction something to learn: a heading is followed by a speech, and
  a speech ends before a heading.

Post-norm (BERT's) at a peak learning rate of 4e-3 stays at the most frequent token; 3e-3 with 150 warm-up updates
trains on every seed tried.

**Fine-tuning** (:func:`turn_task`): two consecutive lines of dialogue, no heading shown; does the second begin the
next speech (someone replies) or does the speaker go on? Balanced; the training pairs come from the training plays,
the test pairs from the evaluation plays, which pre-training never saw.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from tutorial_lib.attention import padding_mask
from tutorial_lib.data.dialogue import (
    Speech,
    WordTokenizer,
    balanced_sample,
    collate_pairs,
    nsp_pairs,
    parse_speeches,
    script_lines,
    split_speeches,
    turn_pairs,
)
from tutorial_lib.data.shakespeare import load_tiny_shakespeare
from tutorial_lib.models.bert import (
    IGNORE_INDEX,
    BERTConfig,
    BERTForPreTraining,
    BERTForSequenceClassification,
    mask_tokens,
)
from tutorial_lib.progress import announce
from tutorial_lib.recipes.cache import cached_model_path, load_or_train, training_lock
from tutorial_lib.training import TrainConfig, TrainHistory, make_adamw, save_atomically, to_device, train

BERT_MIN_COUNT = 3  # a word seen fewer times in the training lines is [UNK]
TINY_BERT_CONFIG = BERTConfig(
    d_vocab=4737, n_ctx=48, d_model=64, n_heads=4, n_layers=4, d_ff=256, dropout=0.0, fast_attention=True,
    fast_norm=True,
)
BERT_TRAIN_CONFIG = TrainConfig(
    max_steps=1500, lr=3e-3, min_lr=3e-4, warmup_steps=150, weight_decay=0.01, betas=(0.9, 0.99), grad_clip=1.0,
    eval_interval=10**9, log_interval=10,  # measured by train_tiny_bert itself, every EVAL_EVERY updates
)
BERT_BATCH_SIZE = 64
# Seconds an update takes on the CI machine (the 2-core AMD EPYC, where each notebook kernel runs on one thread and
# two notebooks run side by side), evaluations included: the time a cell announces before it trains
# (tutorial_lib.progress). Measured with short runs of each recipe, 2026-11-25.
BERT_CI_SECONDS_PER_UPDATE = 0.065
EVAL_BATCH_SIZE = 256
EVAL_SEED = 1234  # the evaluation pairs and masks: drawn once, the same for every model


# --- the data ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScriptData:
    """Tiny Shakespeare split by speeches (the last 10% are later plays), its tokenizer, and the lines as token ids."""

    tokenizer: WordTokenizer
    train_speeches: list[Speech]
    val_speeches: list[Speech]
    train_lines: list[list[int]]  # script_lines of the training speeches, encoded
    val_lines: list[list[int]]


def load_script_data(*, min_count: int = BERT_MIN_COUNT, **load_kwargs) -> ScriptData:
    """The corpus (``load_kwargs`` go to :func:`~tutorial_lib.data.shakespeare.load_tiny_shakespeare`), parsed,
    split and tokenized; the vocabulary comes from the training lines only."""
    train_speeches, val_speeches = split_speeches(parse_speeches(load_tiny_shakespeare(**load_kwargs)))
    tokenizer = WordTokenizer.from_texts(script_lines(train_speeches), min_count=min_count)

    def encode(speeches: list[Speech]) -> list[list[int]]:
        return [tokenizer.encode(line) for line in script_lines(speeches)]

    return ScriptData(tokenizer, train_speeches, val_speeches, encode(train_speeches), encode(val_speeches))


class PretrainingBatch(NamedTuple):
    """``[CLS] A [SEP] B [SEP]`` pairs with masked tokens: the model reads ``inputs`` and must recover ``labels`` (the
    original token where one was chosen, ``IGNORE_INDEX`` elsewhere) and ``is_random_next`` (0 = B follows A)."""

    inputs: Int[Tensor, "batch seq"]
    segments: Int[Tensor, "batch seq"]
    lengths: Int[Tensor, " batch"]
    labels: Int[Tensor, "batch seq"]
    is_random_next: Int[Tensor, " batch"]


def all_mask(tokens: Tensor, mask_id: int, d_vocab: int, special_ids: Sequence[int], generator: torch.Generator,
             p: float = 0.15) -> tuple[Tensor, Tensor]:
    """Main difference with :func:`mask_tokens`: every chosen token becomes ``[MASK]`` (no random, none kept), the
    ablation of "why 80/10/10". The same draws, so the same tokens are chosen."""
    inputs, labels = mask_tokens(tokens, mask_id, d_vocab, special_ids, generator, p)
    return torch.where(labels != IGNORE_INDEX, mask_id, inputs), labels


MASKINGS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {"80/10/10": mask_tokens, "all [MASK]": all_mask}


def make_pretraining_batch(pairs: Sequence[tuple[Sequence[int], Sequence[int], int]], tokenizer: WordTokenizer,
                           n_ctx: int, generator: torch.Generator, *, masking: str = "80/10/10") -> PretrainingBatch:
    """Encode NSP ``pairs`` (token ids of A and B, is_random_next) into a padded batch and mask it."""
    if masking not in MASKINGS:
        raise ValueError(f"masking must be one of {list(MASKINGS)}, got {masking!r}")
    batch = collate_pairs([(a, b) for a, b, _ in pairs], cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                          pad_id=tokenizer.pad_id, n_ctx=n_ctx)
    inputs, labels = MASKINGS[masking](batch.tokens, tokenizer.mask_id, tokenizer.d_vocab, tokenizer.special_ids,
                                       generator)
    return PretrainingBatch(inputs, batch.segments, batch.lengths, labels, torch.tensor([r for _, _, r in pairs]))


def pretraining_batches(lines: Sequence[Sequence[int]], tokenizer: WordTokenizer, *, batch_size: int, n_ctx: int,
                        generator: torch.Generator, masking: str = "80/10/10") -> Callable[[], PretrainingBatch]:
    """A function returning a new batch at each call: every pass over ``lines`` draws new NSP pairs in a new order,
    every batch new masks, all from ``generator``."""
    pending: list[tuple[Sequence[int], Sequence[int], int]] = []

    def next_batch() -> PretrainingBatch:
        if len(pending) < batch_size:
            pairs = nsp_pairs(lines, generator)
            pending[:] = [pairs[i] for i in torch.randperm(len(pairs), generator=generator).tolist()]
        chunk = pending[:batch_size]
        del pending[:batch_size]
        return make_pretraining_batch(chunk, tokenizer, n_ctx, generator, masking=masking)

    return next_batch


def evaluation_batches(lines: Sequence[Sequence[int]], tokenizer: WordTokenizer, *, n_ctx: int,
                       masking: str = "80/10/10", seed: int = EVAL_SEED) -> list[PretrainingBatch]:
    """Every NSP pair of ``lines``, masked, in batches of ``EVAL_BATCH_SIZE``: the same pairs and masks at every call."""
    generator = torch.Generator().manual_seed(seed)
    pairs = nsp_pairs(lines, generator)
    return [make_pretraining_batch(pairs[i : i + EVAL_BATCH_SIZE], tokenizer, n_ctx, generator, masking=masking)
            for i in range(0, len(pairs), EVAL_BATCH_SIZE)]


# --- the loss and the measurements -------------------------------------------------------------------------------------


def bert_pretraining_loss(model: BERTForPreTraining, batch: PretrainingBatch) -> Tensor:
    """:func:`~tutorial_lib.models.bert.pretraining_loss` (MLM + NSP cross-entropies), with the MLM head run on the
    chosen positions only: the other 85% have no label, and skipping them saves most of the head's cost."""
    hidden = model.bert(batch.inputs, batch.segments, mask=padding_mask(batch.lengths, batch.inputs.shape[1]))
    chosen = batch.labels != IGNORE_INDEX
    mlm_logits = model.mlm(hidden[chosen][None])[0]  # (n_chosen, d_vocab)
    return F.cross_entropy(mlm_logits, batch.labels[chosen]) + F.cross_entropy(model.nsp(hidden), batch.is_random_next)


@dataclass(frozen=True)
class PretrainingMetrics:
    """MLM accuracy at the chosen positions, split by what the input showed there ([MASK], a random token, the
    original), the MLM cross-entropy (nats), and NSP's accuracy and cross-entropy."""

    mlm_accuracy: float
    mask_accuracy: float
    random_accuracy: float
    kept_accuracy: float
    mlm_loss: float
    nsp_accuracy: float
    nsp_loss: float
    n_chosen: int
    n_pairs: int


@torch.no_grad()
def pretraining_metrics(model: BERTForPreTraining, batches: Iterable[PretrainingBatch], mask_id: int) -> PretrainingMetrics:
    """Measured on ``batches`` in eval mode (the model's mode is restored); the MLM head runs on the chosen positions
    only, as in :func:`bert_pretraining_loss`."""
    was_training = model.training
    model.eval()
    right: list[Tensor] = []
    shown: list[Tensor] = []  # per chosen position: 0 = [MASK], 1 = a random token, 2 = the original (kept)
    mlm_loss = nsp_loss = 0.0
    nsp_hits = n_pairs = 0
    try:
        for batch in batches:
            hidden = model.bert(batch.inputs, batch.segments, mask=padding_mask(batch.lengths, batch.inputs.shape[1]))
            chosen = batch.labels != IGNORE_INDEX
            labels, inputs = batch.labels[chosen], batch.inputs[chosen]
            mlm_logits = model.mlm(hidden[chosen][None])[0]
            nsp_logits = model.nsp(hidden)
            right.append(mlm_logits.argmax(-1) == labels)
            shown.append(torch.where(inputs == mask_id, 0, torch.where(inputs == labels, 2, 1)))
            mlm_loss += F.cross_entropy(mlm_logits, labels, reduction="sum").item()
            nsp_loss += F.cross_entropy(nsp_logits, batch.is_random_next, reduction="sum").item()
            nsp_hits += (nsp_logits.argmax(-1) == batch.is_random_next).sum().item()
            n_pairs += len(batch.is_random_next)
    finally:
        model.train(was_training)
    right_all, shown_all = torch.cat(right).float(), torch.cat(shown)
    share = [right_all[shown_all == kind].mean().item() if (shown_all == kind).any() else math.nan for kind in range(3)]
    return PretrainingMetrics(right_all.mean().item(), share[0], share[1], share[2], mlm_loss / len(right_all),
                              nsp_hits / n_pairs, nsp_loss / n_pairs, len(right_all), n_pairs)


@dataclass(frozen=True)
class MLMBaselines:
    """What a model that knows only the training lines' word frequencies scores on the same chosen positions:
    always the most frequent word (accuracy), or the frequencies as its prediction (cross-entropy, nats)."""

    most_frequent: str
    most_frequent_accuracy: float
    unigram_cross_entropy: float


def mlm_baselines(train_lines: Sequence[Sequence[int]], batches: Iterable[PretrainingBatch],
                  tokenizer: WordTokenizer) -> MLMBaselines:
    """The frequencies count the tokens MLM may choose (no special token) in ``train_lines``; every such word of the
    vocabulary occurs there (the vocabulary comes from them), so no probability is zero."""
    special = set(tokenizer.special_ids)
    counts = Counter(i for line in train_lines for i in line if i not in special)
    frequency = torch.zeros(tokenizer.d_vocab)
    for i, n in counts.items():
        frequency[i] = n
    frequency /= frequency.sum()
    targets = torch.cat([batch.labels[batch.labels != IGNORE_INDEX] for batch in batches])
    most_frequent = int(frequency.argmax())
    return MLMBaselines(tokenizer.vocab[most_frequent], (targets == most_frequent).float().mean().item(),
                        -frequency[targets].log().mean().item())


# --- pre-training, cached ------------------------------------------------------------------------------------------

EVAL_EVERY = 250  # updates between two measurements of the evaluation pairs
ABLATION_UPDATES = 750  # the all-[MASK] run: the first half of the recipe's updates


class PretrainingRun:
    """One run of :func:`train_tiny_bert`, trained over as many calls of :meth:`train_until` as one likes and ended by
    :meth:`finish`: the model, its optimizer, the batch stream and the record are kept between the calls, so a run in
    parts is the run of one call, bit for bit. The arguments are :func:`train_tiny_bert`'s."""

    def __init__(
        self,
        data: ScriptData,
        *,
        model_cfg: BERTConfig = TINY_BERT_CONFIG,
        train_cfg: TrainConfig = BERT_TRAIN_CONFIG,
        batch_size: int = BERT_BATCH_SIZE,
        masking: str = "80/10/10",
        seed: int = 0,
        stop_after: int | None = None,
        snapshot_at: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if model_cfg.d_vocab != data.tokenizer.d_vocab:
            raise ValueError(f"model_cfg.d_vocab={model_cfg.d_vocab} but the tokenizer has {data.tokenizer.d_vocab} tokens")
        if stop_after is not None and (isinstance(stop_after, bool) or not isinstance(stop_after, int)
                                       or not 1 <= stop_after <= train_cfg.max_steps):
            raise ValueError(f"stop_after must be an int in [1, max_steps={train_cfg.max_steps}] or None, got {stop_after!r}")
        self.last = train_cfg.max_steps if stop_after is None else stop_after
        if snapshot_at is not None and (isinstance(snapshot_at, bool) or not isinstance(snapshot_at, int)
                                        or not 1 <= snapshot_at <= self.last):
            raise ValueError(f"snapshot_at must be an int in [1, {self.last}] (the updates this run makes) or None, "
                             f"got {snapshot_at!r}")
        self.train_cfg, self.snapshot_at, self.device, self.tokenizer = train_cfg, snapshot_at, device, data.tokenizer
        torch.manual_seed(seed)
        self.model = BERTForPreTraining(model_cfg).to(device)
        generator = torch.Generator().manual_seed(seed)
        self.batches = pretraining_batches(data.train_lines, data.tokenizer, batch_size=batch_size,
                                           n_ctx=model_cfg.n_ctx, generator=generator, masking=masking)
        # always measured on 80/10/10 masks, whatever the training's masking: the runs compare
        self.val = [to_device(b, device) for b in evaluation_batches(data.val_lines, data.tokenizer, n_ctx=model_cfg.n_ctx)]
        self.optimizer = make_adamw(self.model, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay, betas=train_cfg.betas)
        self.record: dict = {"steps": [], "train_loss": [], "metrics": [], "updates": 0, "seconds": 0.0}

    def _weights(self) -> dict[str, Tensor]:
        # copies: the training goes on changing the weights in place
        return {name: t.detach().clone().cpu() for name, t in self.model.state_dict().items()}

    def _measure(self) -> float:
        start = time.perf_counter()
        metrics = pretraining_metrics(self.model, self.val, self.tokenizer.mask_id)
        self.record["metrics"].append({"updates": self.record["updates"], **dataclasses.asdict(metrics)})
        return time.perf_counter() - start

    def train_until(self, updates: int | None = None, *, progress: bool = True) -> None:
        """Train until ``updates`` updates are done (default: all this run makes)."""
        updates = self.last if updates is None else updates
        if isinstance(updates, bool) or not isinstance(updates, int) or not self.record["updates"] < updates <= self.last:
            raise ValueError(f"updates must be an int in ({self.record['updates']}, {self.last}] (after the updates "
                             f"done, at most the run's), got {updates!r}")
        record, measuring = self.record, 0.0

        def next_batch() -> PretrainingBatch:  # called once before each update: it counts them
            nonlocal measuring
            if record["updates"] and record["updates"] % EVAL_EVERY == 0:
                measuring += self._measure()
            if record["updates"] == self.snapshot_at:
                record["snapshot"] = self._weights()
            record["updates"] += 1
            return self.batches()

        def log(event: str, info: dict) -> None:
            if event == "step":
                record["steps"].append(info["step"])
                record["train_loss"].append(info["loss"])

        start = time.perf_counter()
        train(self.model, next_batch, bert_pretraining_loss, self.train_cfg, device=self.device, callbacks=[log],
              progress=progress, optimizer=self.optimizer, start_step=record["updates"], stop_at=updates)
        record["seconds"] += time.perf_counter() - start - measuring

    def finish(self, *, progress: bool = True) -> tuple[BERTForPreTraining, dict]:
        """Train what is left, measure the model at its last update; returns the model (in eval mode) and its record."""
        if self.record["updates"] < self.last:
            self.train_until(progress=progress)
        if not self.record["metrics"] or self.record["metrics"][-1]["updates"] != self.record["updates"]:
            self._measure()
        if self.snapshot_at == self.record["updates"] and "snapshot" not in self.record:  # the last update: the model
            self.record["snapshot"] = self._weights()
        return self.model.eval(), self.record


def train_tiny_bert(
    data: ScriptData,
    *,
    model_cfg: BERTConfig = TINY_BERT_CONFIG,
    train_cfg: TrainConfig = BERT_TRAIN_CONFIG,
    batch_size: int = BERT_BATCH_SIZE,
    masking: str = "80/10/10",
    seed: int = 0,
    stop_after: int | None = None,
    snapshot_at: int | None = None,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> tuple[BERTForPreTraining, dict]:
    """Pre-train a BERT of ``model_cfg`` on ``data``'s training lines with MLM and NSP (``masking``: a key of
    :data:`MASKINGS`), and measure it on every pair of the evaluation lines (:func:`pretraining_metrics`, masked
    80/10/10 whatever the training's masking, so that runs compare) every ``EVAL_EVERY`` updates
    and at the end. ``stop_after`` ends the run after that many updates of ``train_cfg``'s schedule (the beginning of
    the same run, for a comparison at equal budget). ``snapshot_at`` keeps a copy of the weights after that many
    updates in ``record["snapshot"]`` (the model a run stopped there would give, without a second run; read it back
    with :func:`model_from_snapshot`). Seeded: initialisation, pairs and masks depend on ``seed`` only.

    Returns the model (in eval mode) and its record: ``steps`` and ``train_loss`` (every ``log_interval`` updates),
    ``metrics`` (a dict per measurement, with ``updates``), ``updates`` done and ``seconds`` of training, the
    measurements excluded. The run in one call; :class:`PretrainingRun` trains it in parts."""
    run = PretrainingRun(data, model_cfg=model_cfg, train_cfg=train_cfg, batch_size=batch_size, masking=masking,
                         seed=seed, stop_after=stop_after, snapshot_at=snapshot_at, device=device)
    return run.finish(progress=progress)


def model_from_snapshot(record: dict, model_cfg: BERTConfig = TINY_BERT_CONFIG) -> BERTForPreTraining:
    """The model of ``record["snapshot"]`` (kept by ``snapshot_at``), in eval mode on the CPU."""
    if "snapshot" not in record:
        raise ValueError("record must hold a snapshot: train with snapshot_at=<updates>")
    model = BERTForPreTraining(model_cfg)
    model.load_state_dict(record["snapshot"], strict=True)
    return model.eval()


def _tiny_bert_what(masking: str, seed: int) -> str:
    """The run's name in the line that announces it (the same whether it is trained or read from the cache)."""
    return f"chapter 14's tiny BERT ({masking} masking, seed {seed})"


def tiny_bert_checkpoint_path(
    model_cfg: BERTConfig = TINY_BERT_CONFIG,
    train_cfg: TrainConfig = BERT_TRAIN_CONFIG,
    batch_size: int = BERT_BATCH_SIZE,
    masking: str = "80/10/10",
    seed: int = 0,
    stop_after: int | None = None,
    *,
    snapshot_at: int | None = None,
    checkpoint_dir: str | Path | None = None,
) -> Path:
    """Where :func:`load_or_train_tiny_bert` keeps the model of these settings (a hash of all of them)."""
    settings = (model_cfg, train_cfg, batch_size, masking, seed, stop_after, BERT_MIN_COUNT, EVAL_EVERY)
    if snapshot_at is not None:  # only then: the files of runs without a snapshot keep their names
        settings += (("snapshot_at", snapshot_at),)
    return cached_model_path("tiny_bert", settings, checkpoint_dir)


def load_or_train_tiny_bert(
    data: ScriptData,
    *,
    model_cfg: BERTConfig = TINY_BERT_CONFIG,
    train_cfg: TrainConfig = BERT_TRAIN_CONFIG,
    batch_size: int = BERT_BATCH_SIZE,
    masking: str = "80/10/10",
    seed: int = 0,
    stop_after: int | None = None,
    snapshot_at: int | None = None,
    checkpoint_dir: str | Path | None = None,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> tuple[BERTForPreTraining, dict]:
    """The model of these settings and its record, trained by :func:`train_tiny_bert` or loaded from the checkpoint
    an earlier call saved (the user cache by default; the file name hashes every setting, so a changed recipe never
    loads a stale model)."""
    path = tiny_bert_checkpoint_path(model_cfg, train_cfg, batch_size, masking, seed, stop_after,
                                     snapshot_at=snapshot_at, checkpoint_dir=checkpoint_dir)
    trained = []  # the model, when this call trains it

    def train_model() -> dict:
        model, record = train_tiny_bert(data, model_cfg=model_cfg, train_cfg=train_cfg, batch_size=batch_size,
                                        masking=masking, seed=seed, stop_after=stop_after, snapshot_at=snapshot_at,
                                        device=device, progress=progress)
        trained.append(model)
        return {"model": model.state_dict(), "record": record}

    updates = train_cfg.max_steps if stop_after is None else stop_after
    saved = load_or_train(path, train_model, what=_tiny_bert_what(masking, seed),
                          expected_seconds=updates * BERT_CI_SECONDS_PER_UPDATE)
    if trained:
        return trained[0], saved["record"]
    model = BERTForPreTraining(model_cfg)
    model.load_state_dict(saved["model"], strict=True)
    return model.to(device).eval(), saved["record"]


class TinyBERTInParts:
    """:func:`load_or_train_tiny_bert` over several calls, for a notebook that trains the run in more than one cell:
    :meth:`train_until` trains the first updates, :meth:`finish` the rest, saves the run to the cache and returns the
    model and its record, as :func:`load_or_train_tiny_bert` does. When the cache holds the run, :meth:`train_until`
    does nothing and :meth:`finish` reads it back. The cache's lock is held from the first update to the save, so
    another process that wants the same run waits for it (and a kernel that stops in between releases it as it exits).
    The arguments are :func:`load_or_train_tiny_bert`'s."""

    def __init__(self, data: ScriptData, **settings) -> None:
        unknown = set(settings) - (set(inspect.signature(load_or_train_tiny_bert).parameters) - {"data", "progress"})
        if unknown:
            raise ValueError(f"settings must be load_or_train_tiny_bert's arguments, got {sorted(unknown)}")
        self.data, self.settings = data, settings
        path_settings = {k: v for k, v in settings.items() if k != "device"}
        self.path = tiny_bert_checkpoint_path(**path_settings)
        self.run: PretrainingRun | None = None
        self.lock = None
        self.first_part = 0  # the updates train_until was asked for (trained, or found in the cache)
        train_cfg = settings.get("train_cfg", BERT_TRAIN_CONFIG)
        self.updates = train_cfg.max_steps if settings.get("stop_after") is None else settings["stop_after"]
        self.what = _tiny_bert_what(settings.get("masking", "80/10/10"), settings.get("seed", 0))

    def train_until(self, updates: int, *, progress: bool = True) -> None:
        """Train the run's first ``updates`` updates, unless the cache holds the run (then nothing is trained)."""
        with announce(f"{self.what[:1].upper()}{self.what[1:]}, updates 1 to {updates} (from the cache, or trained "
                      f"now)", updates * BERT_CI_SECONDS_PER_UPDATE):
            if self.run is None:
                self.lock = training_lock(self.path)  # None: in the cache, and finish() reads it
                if self.lock is not None:
                    self.run = PretrainingRun(self.data, **{k: v for k, v in self.settings.items() if k != "checkpoint_dir"})
            if self.run is not None:
                self.run.train_until(updates, progress=progress)
            self.first_part = updates

    def finish(self, *, progress: bool = True) -> tuple[BERTForPreTraining, dict]:
        """The rest of the run, saved to the cache (or the run read back from it); returns the model and its record."""
        # The same line whether the cache holds the run or not: the cell's output does not depend on it.
        with announce(f"{self.what[:1].upper()}{self.what[1:]}, updates {self.first_part + 1} to {self.updates} (from "
                      f"the cache, or trained now)", (self.updates - self.first_part) * BERT_CI_SECONDS_PER_UPDATE):
            if self.run is None:
                return load_or_train_tiny_bert(self.data, **self.settings, progress=progress)
            try:
                model, record = self.run.finish(progress=progress)
                save_atomically({"model": model.state_dict(), "record": record}, self.path)
            finally:
                self.lock.release()
                self.lock = None
            return model, record


# --- fine-tuning: who speaks next? ---------------------------------------------------------------------------------

TURN_TRAIN_PER_CLASS = 250  # labelled training pairs of each class: 500 in all
# 50 updates of 32 pairs (about 3 passes over the 500 pairs). Measured on the test pairs over seeds 0-4 (2026-11-25):
# pre-trained 89.1-90.9% after 50 updates, 85.0-90.6% after 100, 84.2% (seed 0) after 200; from scratch 74.3-79.8%,
# 75.7-77.5% and 78.5%. Longer runs fit the 500 pairs better and do no better on the test pairs; shorter ones let the
# chapter pay for its seeds.
TURN_TRAIN_CONFIG = TrainConfig(
    max_steps=50, lr=1e-3, min_lr=1e-4, warmup_steps=5, weight_decay=0.01, betas=(0.9, 0.99), grad_clip=1.0,
    eval_interval=10**9, log_interval=10,
)
BAG_OF_WORDS_DECAYS = (1e-3, 1e-2, 1e-1, 1.0)  # the logistic regression's L2 strengths, chosen on held-out pairs
TURN_BATCH_SIZE = 32


@dataclass(frozen=True)
class TurnTask:
    """Pairs ``(A, B, label)`` of consecutive dialogue lines, label 1 when B begins the next speech: a balanced sample
    of the training plays to learn from, and every reply of the evaluation plays with as many continuations to test
    on."""

    train: list[tuple[str, str, int]]
    test: list[tuple[str, str, int]]


def turn_task(data: ScriptData, *, n_train_per_class: int = TURN_TRAIN_PER_CLASS, seed: int = 0) -> TurnTask:
    generator = torch.Generator().manual_seed(seed)
    return TurnTask(balanced_sample(turn_pairs(data.train_speeches), n_train_per_class, generator),
                    balanced_sample(turn_pairs(data.val_speeches), None, generator))


class ClassificationBatch(NamedTuple):
    """``[CLS] A [SEP] B [SEP]`` sequences and their labels."""

    tokens: Int[Tensor, "batch seq"]
    segments: Int[Tensor, "batch seq"]
    lengths: Int[Tensor, " batch"]
    labels: Int[Tensor, " batch"]

    def __getitem__(self, index):  # rows of every field: batch[rows]
        if isinstance(index, int):
            return tuple.__getitem__(self, index)
        return ClassificationBatch(*(field[index] for field in self))


def encode_labelled_pairs(pairs: Sequence[tuple[str, str, int]], tokenizer: WordTokenizer, n_ctx: int) -> ClassificationBatch:
    batch = collate_pairs([(tokenizer.encode(a), tokenizer.encode(b)) for a, b, _ in pairs], cls_id=tokenizer.cls_id,
                          sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id, n_ctx=n_ctx)
    return ClassificationBatch(*batch, torch.tensor([label for _, _, label in pairs]))


def classification_loss(model: nn.Module, batch: ClassificationBatch) -> Tensor:
    logits = model(batch.tokens, batch.segments, mask=padding_mask(batch.lengths, batch.tokens.shape[1]))
    return F.cross_entropy(logits, batch.labels)


def fine_tune(model: BERTForSequenceClassification, train_set: ClassificationBatch, *,
              train_cfg: TrainConfig = TURN_TRAIN_CONFIG, batch_size: int = TURN_BATCH_SIZE, seed: int = 0,
              device: torch.device | str = "cpu", progress: bool = False) -> TrainHistory:
    """Train ``model`` (pre-trained or not) on random mini-batches of ``train_set``, drawn from a generator seeded by
    ``seed``; every parameter is updated."""
    generator = torch.Generator().manual_seed(seed)

    def batch() -> ClassificationBatch:
        rows = torch.randint(len(train_set.labels), (batch_size,), generator=generator)
        chosen = train_set[rows]
        seq = int(chosen.lengths.max())
        return ClassificationBatch(chosen.tokens[:, :seq], chosen.segments[:, :seq], chosen.lengths, chosen.labels)

    history = train(model, batch, classification_loss, train_cfg, device=device, progress=progress)
    model.eval()
    return history


@torch.no_grad()
def class_probabilities(model: nn.Module, batch: ClassificationBatch, *, chunk: int = 256) -> Float[Tensor, "batch n_classes"]:
    """The model's class probabilities for every pair of ``batch`` (in eval mode, on the model's device; returned on
    the CPU, in ``batch``'s order), ``chunk`` pairs at a time."""
    return _classify_in_chunks(model, batch, None, chunk)


@torch.no_grad()
def _classify_in_chunks(model: nn.Module, batch: ClassificationBatch, hidden_from_cls: Tensor | None,
                        chunk: int) -> Tensor:
    # Chunks of pairs of similar length, padded to their own longest: far less padding than the batch's order gives.
    order = batch.lengths.argsort(stable=True)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    parts = []
    try:
        for start in range(0, len(order), chunk):
            rows = order[start : start + chunk]
            b = to_device(batch[rows], device)
            seq = int(b.lengths.max())
            mask = padding_mask(b.lengths, seq)
            if hidden_from_cls is not None:
                mask = mask.expand(-1, seq, -1).clone()  # (batch, query_pos, key_pos)
                mask[torch.arange(len(rows)), 0, hidden_from_cls[rows].to(device)] = False  # [CLS]'s row only
            parts.append((rows, torch.softmax(model(b.tokens[:, :seq], b.segments[:, :seq], mask=mask), dim=-1).cpu()))
    finally:
        model.train(was_training)
    out = torch.empty(len(batch.labels), parts[0][1].shape[1])
    for rows, probabilities in parts:
        out[rows] = probabilities  # back in the batch's order
    return out


def accuracy(model: nn.Module, batch: ClassificationBatch) -> float:
    """The share of ``batch``'s pairs whose most probable class is their label."""
    return (class_probabilities(model, batch).argmax(-1) == batch.labels).float().mean().item()


# --- knocking a token out of [CLS]'s view --------------------------------------------------------------------------


def pair_positions(segments: Int[Tensor, "batch seq"], lengths: Int[Tensor, " batch"]) -> dict[str, Int[Tensor, " batch"]]:
    """For each ``[CLS] A [SEP] B [SEP]`` pair: the position of the last token of A (``"end of A"``), of the first
    token of B (``"start of B"``), and of the first ``[SEP]`` (``"first [SEP]"``)."""
    if segments.dim() != 2 or lengths.shape != segments.shape[:1]:
        raise ValueError(f"segments must be (batch, seq) and lengths (batch,), got {tuple(segments.shape)}, {tuple(lengths.shape)}")
    real = torch.arange(segments.shape[1])[None] < lengths[:, None]
    first_sep = (real & (segments == 0)).sum(-1) - 1  # segment 0 is [CLS] A [SEP]
    return {"end of A": first_sep - 1, "start of B": first_sep + 1, "first [SEP]": first_sep}


def random_text_positions(segments: Int[Tensor, "batch seq"], lengths: Int[Tensor, " batch"], *,
                          avoid: Sequence[Tensor], generator: torch.Generator) -> Int[Tensor, " batch"]:
    """One position per pair, drawn uniformly from its text tokens (A and B: no ``[CLS]``, no ``[SEP]``) other than
    the positions in ``avoid`` (tensors of one position per pair): the control of a knockout, a token hidden at random
    instead of the ones a claim is about."""
    first_sep = pair_positions(segments, lengths)["first [SEP]"]
    position = torch.arange(segments.shape[1])[None]
    allowed = (position >= 1) & (position < lengths[:, None] - 1) & (position != first_sep[:, None])
    for avoided in avoid:
        if avoided.shape != lengths.shape:
            raise ValueError(f"avoid must hold tensors of one position per pair, shape {tuple(lengths.shape)}, "
                             f"got {tuple(avoided.shape)}")
        allowed &= position != avoided[:, None]
    if not allowed.any(-1).all():
        raise ValueError("every pair must hold a text token outside avoid to draw from")
    # A uniform draw among the allowed positions: the argmax of uniform noise restricted to them.
    noise = torch.rand(segments.shape, generator=generator)
    return torch.where(allowed, noise, -1.0).argmax(-1)


def accuracy_hiding_from_cls(model: BERTForSequenceClassification, batch: ClassificationBatch,
                             hidden: Int[Tensor, " batch"], *, chunk: int = 256) -> float:
    """The accuracy when the ``[CLS]`` query of every layer cannot attend to position ``hidden[i]`` of pair ``i``
    (its attention renormalises over the other tokens; every other position still reads it)."""
    if hidden.shape != batch.labels.shape:
        raise ValueError(f"hidden must hold one position per pair, shape {tuple(batch.labels.shape)}, got {tuple(hidden.shape)}")
    if (hidden < 1).any() or (hidden >= batch.lengths).any():
        raise ValueError("hidden must point at a real token after [CLS] in each pair")
    probabilities = _classify_in_chunks(model, batch, hidden, chunk)
    return (probabilities.argmax(-1) == batch.labels).float().mean().item()


# --- the non-neural baseline ----------------------------------------------------------------------------------------


class BagOfWords(nn.Module):
    """Logistic regression on bags of words: the logit that B begins a reply is ``b + Σ_{w in A} u_w + Σ_{w in B}
    v_w``, one weight per word and per segment, whatever the order of the words (special tokens weigh nothing).
    Called like a BERT classifier, it returns two logits, ``(0, logit)``."""

    def __init__(self, d_vocab: int, special_ids: Sequence[int]) -> None:
        super().__init__()
        self.d_vocab = d_vocab
        self.weights = nn.Embedding(2 * d_vocab, 1)  # u for segment 0 (A), then v for segment 1 (B)
        nn.init.zeros_(self.weights.weight)
        self.bias = nn.Parameter(torch.zeros(()))
        self.register_buffer("ordinary", ~torch.isin(torch.arange(d_vocab), torch.tensor(list(special_ids))))

    def forward(self, tokens: Int[Tensor, "batch seq"], segments: Int[Tensor, "batch seq"], *,
                mask: Tensor | None = None) -> Float[Tensor, "batch 2"]:
        weight = self.weights(tokens + self.d_vocab * segments).squeeze(-1) * self.ordinary[tokens]
        logit = self.bias + weight.sum(-1)
        return torch.stack([torch.zeros_like(logit), logit], dim=-1)


def train_bag_of_words(train_set: ClassificationBatch, d_vocab: int, special_ids: Sequence[int], *,
                       weight_decay: float, steps: int = 100) -> BagOfWords:
    """Fit by full-batch L-BFGS, minimising the mean cross-entropy plus ``weight_decay / 2 · ‖weights‖²``."""
    model = BagOfWords(d_vocab, special_ids)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=steps, history_size=20,
                                  line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        optimizer.zero_grad()
        logits = model(train_set.tokens, train_set.segments)
        loss = F.cross_entropy(logits, train_set.labels) + 0.5 * weight_decay * model.weights.weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return model.eval()


def choose_bag_of_words(train_set: ClassificationBatch, d_vocab: int, special_ids: Sequence[int], *,
                        weight_decays: Sequence[float] = BAG_OF_WORDS_DECAYS, held_out: float = 0.2) -> tuple[BagOfWords, float, dict[float, float]]:
    """Choose the L2 strength by the accuracy on the last ``held_out`` share of ``train_set`` (fitted on the rest),
    then fit on all of it. Returns the model, the strength chosen and the held-out accuracy of each."""
    if not 0.0 < held_out < 1.0:
        raise ValueError(f"held_out must lie strictly between 0 and 1, got {held_out!r}")
    cut = int((1 - held_out) * len(train_set.labels))
    scores = {decay: accuracy(train_bag_of_words(train_set[:cut], d_vocab, special_ids, weight_decay=decay),
                              train_set[cut:]) for decay in weight_decays}
    best = max(scores, key=lambda decay: (scores[decay], decay))  # ties: the stronger regularisation
    return train_bag_of_words(train_set, d_vocab, special_ids, weight_decay=best), best, scores


# --- filling in the blanks -----------------------------------------------------------------------------------------


@torch.no_grad()
def fill_mask(model: BERTForPreTraining, tokenizer: WordTokenizer, a: str, b: str, *, k: int = 5) -> list[list[tuple[str, float]]]:
    """The ``k`` most probable words, with their probabilities, at each ``[MASK]`` written in the texts ``a`` and
    ``b`` (read as the pair ``[CLS] a [SEP] b [SEP]``), in order of appearance."""

    def encode(text: str) -> list[int]:
        parts = [tokenizer.encode(part) for part in text.split("[MASK]")]
        return [i for n, part in enumerate(parts) for i in ([tokenizer.mask_id] if n else []) + part]

    batch = collate_pairs([(encode(a), encode(b))], cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                          pad_id=tokenizer.pad_id, n_ctx=model.cfg.n_ctx)
    if not (batch.tokens == tokenizer.mask_id).any():
        raise ValueError("a or b must hold at least one [MASK]")
    was_training = model.training
    model.eval()
    try:
        mlm_logits, _ = model(batch.tokens, batch.segments)
    finally:
        model.train(was_training)
    probabilities = torch.softmax(mlm_logits[batch.tokens == tokenizer.mask_id], dim=-1)
    top = probabilities.topk(k, dim=-1)
    return [[(tokenizer.vocab[i], p) for p, i in zip(values.tolist(), ids.tolist())]
            for values, ids in zip(top.values, top.indices)]


# --- a pre-trained BERT from the hub (optional: it needs the internet) ---------------------------------------------


def bert_config_from_hf(config) -> BERTConfig:
    """Our :class:`BERTConfig` for a Hugging Face ``BertConfig`` (exact GELU only, as the package's BERT)."""
    if config.hidden_act != "gelu":
        raise ValueError(f"config.hidden_act must be 'gelu' (the exact GELU), got {config.hidden_act!r}")
    return BERTConfig(d_vocab=config.vocab_size, n_ctx=config.max_position_embeddings, d_model=config.hidden_size,
                      n_heads=config.num_attention_heads, n_layers=config.num_hidden_layers,
                      d_ff=config.intermediate_size, n_segments=config.type_vocab_size,
                      dropout=config.hidden_dropout_prob, eps=config.layer_norm_eps)


def sst2_sentences(n_train: int, n_test: int, *, seed: int = 0) -> tuple[list[str], list[int], list[str], list[int]]:
    """GLUE's SST-2 (sentiment of film-review sentences; the ``datasets`` package downloads it): ``n_train`` training
    sentences drawn at random by ``seed``, the first ``n_test`` of the validation split, and their labels."""
    import datasets  # noqa: PLC0415 - optional: only this function needs it

    sst2 = datasets.load_dataset("nyu-mll/glue", "sst2")
    train_split = sst2["train"].shuffle(seed=seed).select(range(n_train))
    test_split = sst2["validation"].select(range(n_test))
    return list(train_split["sentence"]), list(train_split["label"]), list(test_split["sentence"]), list(test_split["label"])


def fine_tune_hub_bert(
    name: str,
    train_texts: Sequence[str],
    train_labels: Sequence[int],
    test_texts: Sequence[str],
    test_labels: Sequence[int],
    *,
    epochs: int = 2,
    batch_size: int = 32,
    lr: float = 2e-4,
    max_length: int = 64,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> dict:
    """Load a pre-trained BERT (``name``: a hub name or a folder saved by ``save_pretrained``, with its tokenizer)
    into :class:`BERTForPreTraining` by the strict key map, measure the largest difference from Hugging Face's logits
    on the first test sentences, then fine-tune it for ``epochs`` passes over the training sentences with
    :func:`fine_tune` and measure the test accuracy. Returns ``parity``, ``n_train``, ``updates``, ``accuracy``."""
    import transformers  # noqa: PLC0415 - a test dependency of the package, not a requirement

    hf = transformers.BertForPreTraining.from_pretrained(name).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(name)
    cfg = bert_config_from_hf(hf.config)
    ours = BERTForPreTraining.from_hf_state_dict(hf.state_dict(), cfg).eval()

    def encode(texts: Sequence[str], labels: Sequence[int]) -> ClassificationBatch:
        enc = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return ClassificationBatch(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"].sum(-1),
                                   torch.tensor(list(labels)))

    train_set, test_set = encode(train_texts, train_labels), encode(test_texts, test_labels)
    probe = test_set[:8]
    mask = padding_mask(probe.lengths, probe.tokens.shape[1])
    with torch.no_grad():
        expected = hf(probe.tokens, attention_mask=mask[:, 0].long(), token_type_ids=probe.segments)
        mlm_logits, nsp_logits = ours(probe.tokens, probe.segments, mask=mask)
    real = mask[:, 0, :, None]
    parity = max(((mlm_logits - expected.prediction_logits) * real).abs().max().item(),
                 (nsp_logits - expected.seq_relationship_logits).abs().max().item())
    updates = max(1, epochs * len(train_set.labels) // batch_size)
    train_cfg = TrainConfig(max_steps=updates, lr=lr, min_lr=lr / 10, warmup_steps=max(1, updates // 10),
                            weight_decay=0.01, betas=(0.9, 0.999), grad_clip=1.0, eval_interval=10**9, log_interval=10)
    torch.manual_seed(seed)
    model = BERTForSequenceClassification.from_pretraining(ours, 2)
    fine_tune(model, train_set, train_cfg=train_cfg, batch_size=batch_size, seed=seed, device=device)
    return {"parity": parity, "n_train": len(train_set.labels), "updates": updates,
            "accuracy": accuracy(model, test_set)}
