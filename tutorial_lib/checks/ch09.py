"""Chapter 09's exercises: the warm-up + cosine schedule, one training step, the batches of a language model, and the
training loop made of them.

- ``09.warmup_cosine_lr`` is checked on the whole curve: the learner's function at every update of a run and ten
  steps past its end, so a warm-up one step off, a cosine cut short or one that climbs back up all show.
- ``09.train_step`` runs the learner's step three times on a tiny seeded GPT (float64, with dropout, handed over in
  eval mode, as after an evaluation) and compares the losses it returns and the parameters it leaves with one update
  of the package's own :func:`~tutorial_lib.training.train` each. Plain SGD makes every update ``lr · gradient``, so
  accumulated, doubled, unclipped or zeroed gradients all move the parameters differently (Adam's update hardly
  depends on the gradient's scale, which would hide some of them).
- ``09.get_batch`` prescribes how the offsets are drawn (one ``torch.randint`` with the generator), so the learner's
  batches can be compared with the reference's exactly; a window that may run past the end of the data then either
  raises or draws other offsets, and both are recognised. The generator is part of each case, so the core checks that
  the learner draws from it (and not from the global generator).

Every case rebuilds its generator and model from a seed, so the learner, the reference and every catalogued mistake
see the same inputs. As in ``ch03``, the mistakes are written the way a learner would write them, unannotated.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.data.shakespeare import get_batch
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import TrainConfig, evaluate, language_model_loss, make_adamw, train, warmup_cosine_lr

# --- 09.warmup_cosine_lr ----------------------------------------------------------------------------------------------

EXTRA_STEPS = 10  # steps checked past total_steps: the schedule must stay at min_lr


def _as_float(value, what: str) -> float:
    """A learner's number as a float; anything else is refused with a message that says what was expected."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise WrongOutput("wrong_type", f"{what} should return a number (a Python float), got {type(value).__name__}")


def _lr_curve(fn, args) -> torch.Tensor:
    max_lr, warmup_steps, total_steps, min_lr = args
    return torch.tensor(
        [
            _as_float(fn(step, max_lr=max_lr, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr),
                      "warmup_cosine_lr")
            for step in range(total_steps + EXTRA_STEPS)
        ],
        dtype=torch.float64,
    )


def _schedule_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(max_lr=1e-3, warmup_steps=10, total_steps=50, min_lr=1e-4, note="steps 0 to 59"),
        Case.of(max_lr=0.5, warmup_steps=0, total_steps=20, min_lr=0.05, note="no warm-up, steps 0 to 29"),
        Case.of(max_lr=3e-4, warmup_steps=8, total_steps=8, min_lr=0.0, note="the whole run is warm-up, steps 0 to 17"),
        Case.of(max_lr=1.0, warmup_steps=1, total_steps=3, min_lr=0.25, note="steps 0 to 12"),
    ]


def _cosine(step, max_lr, min_lr, start, length):
    progress = (step - start) / max(1, length)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


@mistake_builder
def _schedule_like(*, warmup="linear", progress="after_warmup", decay_to="min_lr", amplitude="max_lr - min_lr",
                   after_end="min_lr"):
    """A learner's schedule; each keyword reproduces one way of getting it wrong.

    ``warmup``: "none" (warmup_steps ignored: the cosine runs from step 0 over total_steps), "from_zero" (step 0 gets
    0, the last warm-up step falls one short of max_lr) or "one_past" (max_lr only at step warmup_steps).
    ``progress``: "from_step_zero" (the cosine's clock starts at step 0) or "over_total" (divided by total_steps).
    ``decay_to="zero"``: the cosine falls to 0; ``amplitude="max_lr"``: the cosine scaled by max_lr; ``after_end``:
    "zero" (0 after total_steps) or "cosine" (no clamp: the cosine climbs back up).
    """

    def warmup_cosine_lr(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if warmup == "none":
            warmup_steps = 0
        if step < warmup_steps:
            numerator, denominator = {"linear": (1, 0), "from_zero": (0, 0), "one_past": (1, 1)}[warmup]
            return max_lr * (step + numerator) / (warmup_steps + denominator)
        if step >= total_steps and after_end != "cosine":
            return min_lr if after_end == "min_lr" else 0.0
        start, length = {"after_warmup": (warmup_steps, total_steps - warmup_steps),
                         "from_step_zero": (0, total_steps), "over_total": (warmup_steps, total_steps)}[progress]
        elapsed = (step - start) / max(1, length)
        floor = min_lr if decay_to == "min_lr" else 0.0
        span = max_lr - floor if amplitude == "max_lr - min_lr" else max_lr
        return floor + 0.5 * span * (1 + math.cos(math.pi * elapsed))

    return warmup_cosine_lr


def _linear_decay(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    return max_lr - (max_lr - min_lr) * (step - warmup_steps) / max(1, total_steps - warmup_steps)


def _warmup_from_min_lr(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps:
        return min_lr + (max_lr - min_lr) * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    return _cosine(step, max_lr, min_lr, warmup_steps, total_steps - warmup_steps)


def _cosine_without_pi(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(progress))


WARMUP_COSINE_LR = Exercise(
    id="09.warmup_cosine_lr",
    reference=warmup_cosine_lr,
    cases=_schedule_cases,
    points=1,
    call=_lr_curve,
    outputs=("the curve of learning rates",),
    tolerance=(1e-9, 1e-15),  # learning rates as small as 1e-4 must match to rounding, not to 1e-5
    checked=(
        "the learning rate at every update of four runs (10 warm-up updates of 50, none of 20, all 8 of 8, 1 of 3) "
        "and 10 steps past their end: a linear warm-up from max_lr / warmup_steps, half a cosine from max_lr to "
        "min_lr, then min_lr"
    ),
    mistakes=(
        Mistake("no_warmup", "left out the warm-up: the cosine starts at max_lr from the first update",
                "For the first `warmup_steps` updates, raise the rate linearly from max_lr / warmup_steps to max_lr, "
                "and only then start the cosine's clock.", (_schedule_like(warmup="none"),)),
        Mistake("warmup_off_by_one", "put the warm-up one step off",
                "Update `step` counts from 0: the first update gets max_lr / warmup_steps (not 0, which wastes it), "
                "and the last update of the warm-up, the one just before step `warmup_steps`, reaches exactly "
                "max_lr.", (_schedule_like(warmup="from_zero"), _schedule_like(warmup="one_past"))),
        Mistake("cosine_from_step_zero", "started the cosine's clock at step 0 instead of at the end of the warm-up",
                "After the warm-up the rate should start its descent from max_lr: measure the cosine's progress from "
                "the end of the warm-up, not from step 0.", (_schedule_like(progress="from_step_zero"),)),
        Mistake("never_reaches_min_lr", "divided the cosine's progress by total_steps, so it ends above min_lr",
                "The descent lasts only the updates after the warm-up, total_steps − warmup_steps of them: divide by "
                "that, so progress reaches 1 (and the rate min_lr) at total_steps.",
                (_schedule_like(progress="over_total"),)),
        Mistake("decays_below_min_lr", "let the cosine decay to 0 instead of to min_lr",
                "Interpolate between the two: the half cosine runs from max_lr at the start of the descent down to "
                "min_lr at its end, never below it.",
                (_schedule_like(decay_to="zero"), _schedule_like(decay_to="zero", after_end="zero"))),
        Mistake("cosine_amplitude", "scaled the cosine by max_lr instead of max_lr − min_lr, so it starts above max_lr",
                "The half cosine spans max_lr − min_lr: scale it by that difference and add it on top of min_lr.",
                (_schedule_like(amplitude="max_lr"),)),
        Mistake("no_clamp_after_total", "let the cosine climb back up after total_steps",
                "A cosine is periodic: from step `total_steps` on, return min_lr.",
                (_schedule_like(after_end="cosine"),)),
    ),
    mutants=(
        Mutant("linear_decay", "decays linearly from max_lr to min_lr instead of along a half cosine", _linear_decay),
        Mutant("warmup_from_min_lr", "warms up from min_lr rather than from 0", _warmup_from_min_lr),
        Mutant("cosine_without_pi", "takes cos(progress) instead of cos(π · progress)", _cosine_without_pi),
    ),
)


# --- 09.train_step ----------------------------------------------------------------------------------------------------

# Tiny, in float64 so that every mistake moves the parameters far beyond rounding; dropout makes the mode matter.
_STEP_MODEL = GPTConfig(d_vocab=13, n_ctx=8, d_model=16, n_heads=2, n_layers=1, dropout=0.1)


@dataclass(frozen=True)
class _Run:
    """How a case trains: a fresh seeded model and optimizer per call; verdicts show ``<description>``."""

    description: str
    optimizer: str  # "sgd" | "adamw"
    lr: float
    eval_mode: bool  # hand the model over in eval mode, as it is after an evaluation
    seed: int = 0

    def build(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(self.seed)
        model = GPT(_STEP_MODEL).double().train(not self.eval_mode)
        if self.optimizer == "sgd":
            return model, torch.optim.SGD(model.parameters(), lr=self.lr)
        return model, make_adamw(model, lr=self.lr, weight_decay=0.1)

    def __repr__(self) -> str:
        return f"<{self.description}>"


def _paid_before_timing(run: _Run | _LoopRun) -> None:
    """Build a case's run once before the learner's timed call: the first optimizer a process builds imports
    torch._dynamo (3 s, and over 10 s on a loaded machine), seconds that are not the learner's."""
    with torch.random.fork_rng(devices=[]):
        run.build()


def _step_cases(generator: torch.Generator) -> list[Case]:
    def tokens(n_steps: int) -> torch.Tensor:  # (n_steps, batch, n_ctx + 1): each step's inputs and targets
        return torch.randint(_STEP_MODEL.d_vocab, (n_steps, 4, _STEP_MODEL.n_ctx + 1), generator=generator)

    _paid_before_timing(_Run("AdamW, to import what it needs", "adamw", 0.01, eval_mode=False))
    return [
        Case.of(run=_Run("a 1-layer GPT with dropout 0.1, in eval mode; SGD, lr 0.5", "sgd", 0.5, eval_mode=True),
                tokens=tokens(3), grad_clip=0.05, note="3 steps, clipping active"),
        Case.of(run=_Run("the same GPT, in train mode; SGD, lr 0.5", "sgd", 0.5, eval_mode=False, seed=1),
                tokens=tokens(2), grad_clip=None, note="2 steps, no clipping"),
        Case.of(run=_Run("the same GPT, in eval mode; AdamW (make_adamw), lr 0.01", "adamw", 0.01, eval_mode=True, seed=2),
                tokens=tokens(3), grad_clip=1.0, note="3 steps"),
    ]


def _run_steps(obj, args) -> tuple[torch.Tensor, torch.Tensor]:
    run, tokens, grad_clip = args
    with torch.random.fork_rng(devices=[]):  # model init and dropout draw from the global generator: restore it after
        model, optimizer = run.build()
        losses = [
            _as_float(obj(model, (batch[:, :-1], batch[:, 1:]), language_model_loss, optimizer, grad_clip), "train_step")
            for batch in tokens
        ]
    parameters = torch.cat([p.detach().flatten() for p in model.parameters()])
    return torch.tensor(losses, dtype=torch.float64), parameters


def reference_train_step(model, batch, loss_fn, optimizer, grad_clip=None) -> float:
    """One update exactly as :func:`~tutorial_lib.training.train` makes it: one step of ``train`` itself."""
    cfg = TrainConfig(max_steps=1, lr=optimizer.param_groups[0]["lr"], warmup_steps=0, schedule="constant", grad_clip=grad_clip)
    history = train(model, lambda: batch, loss_fn, cfg, device="cpu", optimizer=optimizer, progress=False)
    return history.train_loss[0]


@mistake_builder
def _step(*, train_mode=True, zero_grad="before", backward=1, retain_graph=False, clip="after_backward", step=True):
    """A learner's training step; each keyword reproduces one way of getting it wrong."""

    def train_step(model, batch, loss_fn, optimizer, grad_clip=None):
        def clip_now():
            if grad_clip is not None:
                if clip == "value":
                    nn.utils.clip_grad_value_(model.parameters(), grad_clip)
                else:
                    nn.utils.clip_grad_norm_(model.parameters(), grad_clip)

        if train_mode:
            model.train()
        if zero_grad == "before":
            optimizer.zero_grad()
        loss = loss_fn(model, batch)
        if clip == "before_backward":
            clip_now()
        for _ in range(backward):
            loss.backward(retain_graph=retain_graph)
        if zero_grad == "after_backward":
            optimizer.zero_grad()
        if clip in ("after_backward", "value"):
            clip_now()
        if step:
            optimizer.step()
        if clip == "after_step":
            clip_now()
        return loss.item()

    return train_step


def _always_clip_at_one(model, batch, loss_fn, optimizer, grad_clip=None):
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model, batch)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # grad_clip forgotten
    optimizer.step()
    return loss.item()


def _loss_without_grad(model, batch, loss_fn, optimizer, grad_clip=None):
    model.train()
    optimizer.zero_grad()
    with torch.no_grad():  # copied from the evaluation loop
        loss = loss_fn(model, batch)
    loss.backward()
    if grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


TRAIN_STEP = Exercise(
    id="09.train_step",
    forbidden=(train,),
    reference=reference_train_step,
    cases=_step_cases,
    points=2,
    call=_run_steps,
    outputs=("the sequence of returned losses", "the parameter vector after the steps"),
    tolerance=(1e-9, 1e-12),  # float64 and the same operations: a correct step agrees to rounding
    checked=(
        "two or three steps of a tiny GPT with dropout, handed over in eval mode or train mode, with SGD and with "
        "AdamW, with and without clipping: the same losses and the same parameters as the package's `train`"
    ),
    mistakes=(
        Mistake("no_train_mode", "did not put the model in training mode",
                "A model handed over after an evaluation is in eval mode, where dropout is off: call `model.train()` "
                "first.", (_step(train_mode=False),)),
        Mistake("no_zero_grad", "forgot `optimizer.zero_grad()`, so the gradients of every step accumulate",
                "`backward()` adds to `.grad`; clear it before each backward pass with `optimizer.zero_grad()`.",
                (_step(zero_grad="never"),)),
        Mistake("backward_twice", "called `loss.backward()` twice",
                "Once per step: a second call either fails (the graph is freed) or, with `retain_graph=True`, "
                "doubles the gradient.", (_step(backward=2), _step(backward=2, retain_graph=True))),
        Mistake("clipped_at_the_wrong_time",
                "clipped the gradients at the wrong moment (or not at all), so the update used unclipped gradients",
                "Clipping changes `.grad`, so it must come after `loss.backward()` (which fills it) and before "
                "`optimizer.step()` (which reads it).",
                (_step(clip="after_step"), _step(clip="before_backward"), _step(clip="never"))),
        Mistake("clipped_values", "clipped each gradient entry (`clip_grad_value_`) instead of the gradient's norm",
                "`nn.utils.clip_grad_norm_` rescales the whole gradient when its norm exceeds grad_clip, keeping its "
                "direction; clipping entries one by one changes the direction.", (_step(clip="value"),)),
        Mistake("no_update", "made no update: `optimizer.step()` is missing, or the gradients were cleared "
                "between `backward()` and `step()`",
                "`optimizer.step()` applies the update from `.grad`: clear the gradients before `loss.backward()`, "
                "never between it and the step, and do call the step.",
                (_step(step=False), _step(zero_grad="after_backward"))),
    ),
    mutants=(
        Mutant("ignored_grad_clip", "always clips at norm 1.0 whatever grad_clip says", _always_clip_at_one),
        Mutant("loss_without_grad", "computes the loss under torch.no_grad(), so backward has no graph",
               _loss_without_grad),
    ),
)


# --- 09.get_batch -----------------------------------------------------------------------------------------------------


def _batch_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(data=torch.randint(65, (200,), generator=generator), batch_size=8, n_ctx=16,
                generator=torch.Generator().manual_seed(0)),
        Case.of(data=torch.randint(65, (10,), generator=generator), batch_size=32, n_ctx=4,
                generator=torch.Generator().manual_seed(1), note="short data: every start is drawn, the last valid one included"),
        Case.of(data=torch.randint(65, (9,), generator=generator), batch_size=3, n_ctx=8,
                generator=torch.Generator().manual_seed(2), note="a single valid window"),
    ]


@mistake_builder
def _batch_like(*, starts="valid", shift="y_later", windows="slices"):
    """A learner's get_batch; ``starts`` and ``shift`` each reproduce one way of getting it wrong.

    ``starts``: the upper bound handed to ``torch.randint``, "one_too_many" (len(data) − n_ctx + 1), "all"
    (len(data)) or "one_too_few" (len(data) − n_ctx − 1). ``shift``: "none" (y = x), "swapped" (x one token later
    than y) or "y_earlier" (y one token earlier than x). ``windows`` is only how the windows are cut, right either
    way: "slices" (a loop over slices, nanoGPT's way) or "indexed" (one index tensor of the windows' positions).
    """
    x_offset, y_offset = {"y_later": (0, 1), "none": (0, 0), "swapped": (1, 0), "y_earlier": (0, -1)}[shift]

    def get_batch(data, batch_size, n_ctx, generator):
        high = {"valid": len(data) - n_ctx, "one_too_many": len(data) - n_ctx + 1, "all": len(data),
                "one_too_few": len(data) - n_ctx - 1}[starts]
        drawn = torch.randint(high, (batch_size,), generator=generator)
        if windows == "indexed":
            positions = drawn[:, None] + torch.arange(n_ctx)
            return data[positions + x_offset], data[positions + y_offset]
        x = torch.stack([data[s + x_offset : s + x_offset + n_ctx] for s in drawn])
        y = torch.stack([data[s + y_offset : s + y_offset + n_ctx] for s in drawn])
        return x, y

    return get_batch


def _separate_draws(data, batch_size, n_ctx, generator):
    x_starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator)
    y_starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator)  # y from other windows
    x = torch.stack([data[s : s + n_ctx] for s in x_starts])
    y = torch.stack([data[s + 1 : s + 1 + n_ctx] for s in y_starts])
    return x, y


def _stacked_on_dim_1(data, batch_size, n_ctx, generator):
    starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator)
    x = torch.stack([data[s : s + n_ctx] for s in starts], dim=1)
    y = torch.stack([data[s + 1 : s + 1 + n_ctx] for s in starts], dim=1)
    return x, y


GET_BATCH = Exercise(
    id="09.get_batch",
    forbidden=(get_batch,),
    reference=lambda data, batch_size, n_ctx, generator: get_batch(data, batch_size, n_ctx, generator),
    cases=_batch_cases,
    points=1,
    outputs=("x", "y"),
    checked=(
        "batches of 8 windows from 200 tokens, 32 windows from 10 tokens (every start drawn) and 3 from 9 tokens (one "
        "valid window): x the windows, y the same windows one token later"
    ),
    mistakes=(
        Mistake("y_not_shifted", "returned the same windows as inputs and targets",
                "Position t must predict the *next* token: y is the same window as x, moved one token later.",
                (_batch_like(shift="none"),)),
        Mistake("shifted_the_wrong_way", "shifted the targets the wrong way",
                "x is the window that begins at the drawn start and y the same window one token *later*; y must not "
                "be the earlier one.",
                (_batch_like(shift="swapped"), _batch_like(shift="y_earlier"))),
        Mistake("runs_past_the_end", "drew starts whose target window runs past the end of the data",
                "x and y together span n_ctx + 1 tokens, so the last valid start is len(data) − n_ctx − 1: "
                "`torch.randint` never draws its upper bound, and a bound of len(data) − n_ctx gives exactly the "
                "valid starts.",
                (_batch_like(starts="one_too_many"), _batch_like(starts="one_too_many", windows="indexed"),
                 _batch_like(starts="all"), _batch_like(starts="all", windows="indexed"))),
        Mistake("misses_the_last_window", "never drew the last valid window",
                "`torch.randint` draws from 0 up to one less than its upper bound, so a bound of len(data) − n_ctx "
                "already excludes the windows that would run past the end: subtract nothing more.",
                (_batch_like(starts="one_too_few"),)),
    ),
    mutants=(
        Mutant("separate_draws", "draws the starts of y separately from those of x", _separate_draws),
        Mutant("stacked_on_dim_1", "stacks the windows along dim 1: (n_ctx, batch_size)", _stacked_on_dim_1),
    ),
)

# --- 09.predict_initial_loss (predict, then measure) -------------------------------------------------------------------


def initial_loss() -> float:
    """The loss of the chapter's character GPT (65 characters; 2 layers of width 64 here, to be quick) at GPT-2's
    initialisation, before any update, on a batch of 4 × 64 random characters (seed 0), in nats."""
    from tutorial_lib.models.gpt import GPT
    from tutorial_lib.recipes import CHAR_GPT_CONFIG

    config = CHAR_GPT_CONFIG.replace(d_model=64, n_heads=4, n_layers=2, n_ctx=64)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = GPT(config).eval()
    tokens = torch.randint(config.d_vocab, (4, config.n_ctx + 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).item()


PREDICT_INITIAL_LOSS = predict_number(
    "09.predict_initial_loss",
    measure=initial_loss,
    question="the loss of the untrained character GPT",
    within=1.2,
    misconceptions=[
        Misconception("unigram_entropy", 3.309, "expected the untrained model to know how often each character occurs "
                                                "(the unigram entropy, 3.31 nats)",
                      "Before any update the model knows nothing, not even the frequencies: its logits are nearly "
                      "equal, so it spreads its probability evenly over all 65 characters, and pays for that."),
        Misconception("bits_not_nats", math.log2(65), "computed the uniform guess's loss in bits, log₂ 65",
                      "`F.cross_entropy` uses the natural logarithm: measure the uniform guess's cost in nats."),
        Misconception("vocab_size", 65.0, "took the loss to be the number of characters",
                      "The loss is the negative *log*-probability of the right character, not a count of the "
                      "characters."),
        Misconception("probability_not_loss", 1 / 65, "gave the probability of the right character, 1/65, not its loss",
                      "The loss is not that probability but the negative natural log of it."),
    ],
    mutants=[
        wrong_prediction("half", 0.5, "below anything an untrained model reaches"),
        wrong_prediction("twenty", 20.0, "far above a uniform guess"),
    ],
    points=1,
)


# --- 09.training_loop: the loop made of the learner's schedule and step -----------------------------------------------


@dataclass(frozen=True)
class _LoopRun:
    """A seeded run for the loop: the model (float64, dropout 0.1), its optimizer built with lr = max_lr, and the
    training and validation batches, drawn from their own generators; verdicts show ``<description>``."""

    description: str
    optimizer: str  # "sgd" | "adamw"
    max_lr: float
    seed: int

    def build(self) -> tuple[nn.Module, torch.optim.Optimizer, Callable, Callable]:
        torch.manual_seed(self.seed)
        model = GPT(_STEP_MODEL).double()
        if self.optimizer == "sgd":
            optimizer = torch.optim.SGD(model.parameters(), lr=self.max_lr)
        else:
            optimizer = make_adamw(model, lr=self.max_lr, weight_decay=0.1)
        tokens = torch.randint(_STEP_MODEL.d_vocab, (400,), generator=torch.Generator().manual_seed(self.seed))
        train_draws = torch.Generator().manual_seed(self.seed + 1)
        val_draws = torch.Generator().manual_seed(self.seed + 2)
        n_ctx = _STEP_MODEL.n_ctx
        return (model, optimizer, lambda: get_batch(tokens[:300], 4, n_ctx, train_draws),
                lambda: get_batch(tokens[300:], 4, n_ctx, val_draws))

    def __repr__(self) -> str:
        return f"<{self.description}>"


def _loop_cases(generator: torch.Generator) -> list[Case]:
    _paid_before_timing(_LoopRun("AdamW, to import what it needs", "adamw", 0.01, seed=0))
    return [
        Case.of(run=_LoopRun("a 1-layer GPT with dropout 0.1; AdamW (make_adamw)", "adamw", 0.02, seed=0),
                max_steps=7, min_lr=0.002, warmup_steps=2, grad_clip=0.5, eval_interval=3, eval_batches=2,
                note="evaluations after updates 3, 6 and 7"),
        Case.of(run=_LoopRun("the same GPT; SGD", "sgd", 0.5, seed=1), max_steps=4, min_lr=0.05, warmup_steps=0,
                grad_clip=None, eval_interval=2, eval_batches=3, note="no warm-up, no clipping"),
        Case.of(run=_LoopRun("the same GPT; AdamW (make_adamw)", "adamw", 0.01, seed=2), max_steps=5, min_lr=0.0,
                warmup_steps=5, grad_clip=1.0, eval_interval=10, eval_batches=1,
                note="all warm-up; one evaluation, at the end"),
    ]


def _run_loop(obj, args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    run, max_steps, min_lr, warmup_steps, grad_clip, eval_interval, eval_batches = args
    with torch.random.fork_rng(devices=[]):  # model init and dropout draw from the global generator: restore it after
        model, optimizer, train_batches, val_batches = run.build()
        returned = obj(model, optimizer, train_batches, val_batches, language_model_loss, max_steps=max_steps,
                       max_lr=run.max_lr, min_lr=min_lr, warmup_steps=warmup_steps, grad_clip=grad_clip,
                       eval_interval=eval_interval, eval_batches=eval_batches)
    if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[1], dict)):
        raise WrongOutput("wrong_type", "train_model should return (train_losses, val_losses): a list of floats and a "
                                        f"dict {{updates done: validation loss}}, got {type(returned).__name__}")
    train_losses, val_losses = returned
    evaluated = sorted(val_losses)
    if not all(isinstance(k, int) and not isinstance(k, bool) for k in evaluated):
        raise WrongOutput("wrong_type", "val_losses should map the number of updates done (an int) to the loss")
    parameters = torch.cat([p.detach().flatten() for p in model.parameters()])
    return (torch.tensor([_as_float(v, "train_model's train_losses") for v in train_losses], dtype=torch.float64),
            torch.tensor(evaluated, dtype=torch.int64),
            torch.tensor([_as_float(val_losses[k], "train_model's val_losses") for k in evaluated], dtype=torch.float64),
            parameters)


def reference_train_model(model, optimizer, train_batches, val_batches, loss_fn, *, max_steps, max_lr, min_lr,
                          warmup_steps, grad_clip, eval_interval, eval_batches):
    """The package's :func:`~tutorial_lib.training.train` with the same settings, in the exercise's return format."""
    cfg = TrainConfig(max_steps=max_steps, lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, grad_clip=grad_clip,
                      eval_interval=eval_interval, eval_batches=eval_batches, log_interval=1)
    history = train(model, train_batches, loss_fn, cfg, device="cpu", val_batches=val_batches, optimizer=optimizer,
                    progress=False)
    return history.train_loss, dict(zip(history.eval_steps, history.val_loss))


@mistake_builder
def _loop(*, lr_set="before_update", lr_step="step", eval_mode=True, eval_on="val", when="after_update",
          n_eval="eval_batches", mean=True, clip=True):
    """A learner's training loop; each keyword reproduces one way of getting it wrong.

    ``lr_set``: "before_update", "after_update" (the rate set after the step, so each update uses the previous one's)
    or "never". ``lr_step``: "step" or "step_plus_one" (the schedule read one update ahead). ``eval_mode``: False
    evaluates with dropout on. ``eval_on``: "val" or "train". ``when``: "after_update" (after every eval_interval-th
    update and after the last), "before_update" (at steps 0, eval_interval, …, before their update), "no_final" (not
    after the last update unless it falls on the interval). ``n_eval``: "eval_batches" or "one". ``mean``: False sums
    the batches' losses. ``clip``: False never hands grad_clip to the step.
    """
    def estimate(model, batches, loss_fn, n_batches):
        return _learners_estimate(model, batches, loss_fn, n_batches, eval_mode=eval_mode, mean=mean)

    def train_model(model, optimizer, train_batches, val_batches, loss_fn, *, max_steps, max_lr, min_lr, warmup_steps,
                    grad_clip, eval_interval, eval_batches):
        def set_lr(step):
            at = step + 1 if lr_step == "step_plus_one" else step
            for group in optimizer.param_groups:
                group["lr"] = _learners_lr(at, max_lr=max_lr, warmup_steps=warmup_steps, total_steps=max_steps,
                                           min_lr=min_lr)

        train_losses, val_losses = [], {}
        for step in range(max_steps):
            if when == "before_update" and step % eval_interval == 0:
                val_losses[step] = estimate(model, val_batches if eval_on == "val" else train_batches, loss_fn,
                                            eval_batches if n_eval == "eval_batches" else 1)
            if lr_set == "before_update":
                set_lr(step)
            train_losses.append(_learners_step(model, train_batches(), loss_fn, optimizer, grad_clip if clip else None))
            if lr_set == "after_update":
                set_lr(step)
            done = step + 1
            if when != "before_update" and (done % eval_interval == 0 or (when == "after_update" and done == max_steps)):
                val_losses[done] = estimate(model, val_batches if eval_on == "val" else train_batches, loss_fn,
                                            eval_batches if n_eval == "eval_batches" else 1)
        return train_losses, val_losses

    return train_model


# The loop's catalogue is made of the right schedule and step of the two catalogues above (an answer may not call the
# package's), and of an evaluation written as a learner would.
_learners_lr = _schedule_like()
_learners_step = _step()


def _learners_estimate(model, batches, loss_fn, n_batches, *, eval_mode=True, mean=True):
    """An evaluation written as a learner would: ``mean=False`` sums, ``eval_mode=False`` leaves dropout on."""
    was_training = model.training
    model.train(not eval_mode)
    with torch.no_grad():
        total = sum(loss_fn(model, batches()).item() for _ in range(n_batches))
    model.train(was_training)
    return total / n_batches if mean else total


def _evaluates_before_training(model, optimizer, train_batches, val_batches, loss_fn, **settings):
    """Evaluates once before the first update, as well as when it should: one evaluation too many."""
    first = {0: _learners_estimate(model, val_batches, loss_fn, settings["eval_batches"])}
    train_losses, val_losses = _loop()(model, optimizer, train_batches, val_batches, loss_fn, **settings)
    return train_losses, first | val_losses


def _never_evaluates(model, optimizer, train_batches, val_batches, loss_fn, **settings):
    train_losses, _ = _loop()(model, optimizer, train_batches, val_batches, loss_fn, **settings)
    return train_losses, {}


def _keyed_by_step(model, optimizer, train_batches, val_batches, loss_fn, **settings):
    train_losses, val_losses = _loop()(model, optimizer, train_batches, val_batches, loss_fn, **settings)
    return train_losses, {done - 1: loss for done, loss in val_losses.items()}


TRAINING_LOOP = Exercise(
    id="09.training_loop",
    forbidden=(train, evaluate, warmup_cosine_lr, reference_train_step),
    reference=reference_train_model,
    cases=_loop_cases,
    points=3,
    call=_run_loop,
    outputs=("the list of training losses", "the list of updates after which it evaluated",
             "the list of validation losses", "the parameter vector after training"),
    tolerance=(1e-9, 1e-12),  # float64 and the same operations: a correct loop agrees to rounding
    checked=(
        "7, 4 and 5 updates of a tiny GPT with dropout, with AdamW and SGD, with and without warm-up and clipping, "
        "evaluating every 3, 2 and 10 updates: the same losses, evaluations and parameters as the package's `train` "
        "from the same seed, batches and optimizer"
    ),
    mistakes=(
        Mistake("lr_never_set", "never set the learning rate, so every update used the optimizer's max_lr",
                "The schedule does nothing until its value is in the optimizer: before each update, write it into "
                "the learning rate of every one of the optimizer's parameter groups.", (_loop(lr_set="never"),)),
        Mistake("lr_one_update_off", "gave update `step` the learning rate of another update",
                "Update `step` (counted from 0) runs with the schedule's value at that same step, set *before* its "
                "training step; setting it after the step, or reading the schedule one step ahead, shifts the whole "
                "curve by one.",
                (_loop(lr_set="after_update"), _loop(lr_step="step_plus_one"))),
        Mistake("evaluated_in_train_mode", "evaluated with dropout on (the model in train mode)",
                "Put the model in eval mode for the evaluation (`model.eval()`), and back in train mode after it: in "
                "train mode dropout makes the validation loss noisy, and draws random numbers the training needed.",
                (_loop(eval_mode=False),)),
        Mistake("evaluated_on_training_batches", "measured the validation loss on training batches",
                "Evaluate on `val_batches()`: training batches measure what the model has seen (and drawing them "
                "changes the batches the next updates get).", (_loop(eval_on="train"),)),
        Mistake("evaluated_at_the_wrong_updates", "evaluated at the wrong moments",
                "Evaluate each time the number of updates done (step + 1, not step) is a multiple of eval_interval, "
                "keyed by that number, and once more after the last update, whatever the interval.",
                (_loop(when="before_update"), _loop(when="no_final"), _evaluates_before_training)),
        Mistake("evaluated_too_few_batches", "evaluated one batch instead of `eval_batches`",
                "Average the loss over `eval_batches` batches: one batch is a noisy estimate.", (_loop(n_eval="one"),)),
        Mistake("summed_the_validation_losses", "summed the validation batches' losses instead of averaging them",
                "Divide the sum by the number of batches: the validation loss is a mean, comparable with the training "
                "loss.", (_loop(mean=False),)),
        Mistake("never_clipped", "never clipped the gradients",
                "Hand `grad_clip` to your `train_step`, which clips after `backward()` and before the update.",
                (_loop(clip=False),)),
    ),
    mutants=(
        Mutant("never_evaluates", "never evaluates", _never_evaluates),
        Mutant("keyed_by_step", "keys the validation losses by the 0-based step, not by the updates done",
               _keyed_by_step),
    ),
)

register(WARMUP_COSINE_LR, TRAIN_STEP, GET_BATCH, PREDICT_INITIAL_LOSS, TRAINING_LOOP)
