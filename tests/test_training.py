"""Schedules against their equations, label smoothing against PyTorch, the training loop, checkpoints."""

from __future__ import annotations

import dataclasses
import math
from itertools import pairwise

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.data.dates import Seq2SeqBatch
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import (
    TrainConfig,
    constant_lr,
    evaluate,
    label_smoothing_loss,
    language_model_loss,
    load_checkpoint,
    make_adamw,
    noam_lr,
    save_checkpoint,
    to_device,
    train,
    warmup_cosine_lr,
)

TOL = {"atol": 1e-5, "rtol": 0.0}

# ------------------------------------------------------------------------------ schedules


@pytest.mark.parametrize("step", [1, 10, 1000, 3999, 4000, 4001, 10_000, 100_000])
def test_noam_matches_eq_3(step):
    d_model, warmup = 512, 4000
    expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert noam_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)


def test_noam_peaks_at_the_end_of_warmup():
    d_model, warmup = 512, 4000
    rates = [noam_lr(step, d_model, warmup) for step in range(1, 12_000)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == warmup
    assert max(rates) == pytest.approx(d_model**-0.5 * warmup**-0.5, rel=1e-12)  # ≈ 7.0e-4 for the base model
    assert rates[99] == pytest.approx(100 * rates[0], rel=1e-12), "linear during warm-up"
    assert noam_lr(0, d_model, warmup) == 0.0


def test_warmup_cosine_endpoints_and_shape():
    kwargs = {"max_lr": 1.0, "warmup_steps": 10, "total_steps": 110, "min_lr": 0.1}
    rates = [warmup_cosine_lr(step, **kwargs) for step in range(130)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0) and rates[10] == pytest.approx(1.0)
    assert rates[60] == pytest.approx(0.55), "half-way through the decay: the mean of max and min"
    assert rates[110] == rates[129] == pytest.approx(0.1)
    assert all(a <= b for a, b in pairwise(rates[:11])), "increasing during warm-up"
    assert all(a >= b for a, b in pairwise(rates[10:])), "non-increasing after it"
    assert warmup_cosine_lr(0, max_lr=3e-4, warmup_steps=0, total_steps=5) == pytest.approx(3e-4)


def test_constant_lr():
    assert [constant_lr(s, max_lr=1.0, warmup_steps=4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert constant_lr(0, max_lr=0.5) == 0.5


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: noam_lr(-1, 512, 4000), "step"),
        (lambda: noam_lr(1, 512, 0), "warmup"),
        (lambda: warmup_cosine_lr(0, max_lr=1.0, warmup_steps=20, total_steps=10), "warmup_steps=20 must be <= total_steps=10"),
        (lambda: warmup_cosine_lr(0, max_lr=1.0, warmup_steps=0, total_steps=0), "total_steps"),
    ],
)
def test_schedule_bad_arguments(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


# ------------------------------------------------------------------------------ losses


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("ignore_index", [None, 0])
def test_label_smoothing_matches_pytorch(smoothing, ignore_index):
    logits = torch.randn(3, 7, 11, requires_grad=True)
    targets = torch.randint(0, 11, (3, 7))
    targets[0, :3] = 0  # some padding to ignore
    ours = label_smoothing_loss(logits, targets, smoothing, ignore_index=ignore_index)
    torch_ignore = -100 if ignore_index is None else ignore_index  # PyTorch's default ignores nothing here
    ref = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), label_smoothing=smoothing, ignore_index=torch_ignore)
    torch.testing.assert_close(ours, ref, **TOL)
    torch.testing.assert_close(torch.autograd.grad(ours, logits)[0], torch.autograd.grad(ref, logits)[0], **TOL)


def test_label_smoothing_bad_argument():
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothing_loss(torch.randn(1, 2, 5), torch.zeros(1, 2, dtype=torch.long), 1.0)


def test_language_model_loss_is_next_token_cross_entropy():
    model = GPT(GPTConfig(d_vocab=20, n_ctx=8, d_model=16, n_heads=2, n_layers=1))
    x, y = torch.randint(0, 20, (2, 8)), torch.randint(0, 20, (2, 8))
    expected = F.cross_entropy(model(x).reshape(-1, 20), y.reshape(-1))
    torch.testing.assert_close(language_model_loss(model, (x, y)), expected, **TOL)


# ------------------------------------------------------------------------------ the loop

CFG = GPTConfig(d_vocab=16, n_ctx=16, d_model=32, n_heads=2, n_layers=2)
SEQUENCE = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2])


def repeated_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The same 16-token sequence, four times: a model can learn it perfectly."""
    return SEQUENCE[:-1].repeat(4, 1), SEQUENCE[1:].repeat(4, 1)


def fresh_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(CFG)


def quick_config(**changes) -> TrainConfig:
    return TrainConfig(**{"max_steps": 30, "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 3, "log_interval": 1, **changes})


def test_train_learns_a_repeated_sequence_deterministically():
    runs = [
        train(fresh_model(), repeated_batch, language_model_loss, quick_config(), device="cpu", progress=False)
        for _ in range(2)
    ]
    losses = runs[0].train_loss
    assert losses[0] == pytest.approx(math.log(CFG.d_vocab), abs=0.2)  # a fresh model is nearly uniform
    assert losses[-1] < 0.1 * losses[0], f"30 steps on one repeated sequence should cut the loss ten-fold: {losses}"
    assert runs[0].train_loss == runs[1].train_loss, "the same seed must give the same run"
    assert runs[0].steps == list(range(30))


def test_train_follows_the_schedule_and_reports_to_callbacks():
    events: list[tuple[str, dict]] = []
    cfg = quick_config(max_steps=6, log_interval=2, eval_interval=4, eval_batches=2)
    model = fresh_model()
    optimizer = make_adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay)
    history = train(
        model, repeated_batch, language_model_loss, cfg, device="cpu", val_batches=repeated_batch,
        optimizer=optimizer, callbacks=[lambda kind, info: events.append((kind, info))], progress=False,
    )
    assert history.steps == [0, 2, 4, 5]  # every log_interval, and the last step
    assert history.lr == [cfg.lr_at(s) for s in history.steps]
    assert all(group["lr"] == cfg.lr_at(5) for group in optimizer.param_groups)
    assert history.eval_steps == [4, 6] and history.final_val_loss == history.val_loss[-1]
    assert [kind for kind, _ in events] == ["step", "step", "eval", "step", "step", "eval"]
    assert model.training, "train() leaves the model in training mode"


def total_grad_norm(model: torch.nn.Module) -> float:
    return torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters() if p.grad is not None)).item()


def test_gradient_clipping_is_applied():
    """The gradients left after the last update are the clipped ones."""
    unclipped, clipped = fresh_model(), fresh_model()
    for model, grad_clip in ((unclipped, None), (clipped, 1e-3)):
        cfg = quick_config(max_steps=1, warmup_steps=0, grad_clip=grad_clip)
        train(model, repeated_batch, language_model_loss, cfg, device="cpu", progress=False)
    assert total_grad_norm(unclipped) > 0.01, "the test needs a gradient larger than the clip"
    assert total_grad_norm(clipped) == pytest.approx(1e-3, rel=1e-3)


def test_evaluate_runs_in_eval_mode_and_restores_the_mode():
    seen: list[bool] = []

    def loss_fn(model, batch):
        seen.append(model.training)
        return language_model_loss(model, batch)

    model = fresh_model()
    for mode in (True, False):
        model.train(mode)
        loss = evaluate(model, repeated_batch, loss_fn, 3, "cpu")
        assert model.training is mode
    assert seen == [False] * 6
    assert loss == pytest.approx(language_model_loss(model.eval(), repeated_batch()).item(), abs=1e-6)


def test_make_adamw_decays_matrices_only():
    model = fresh_model()
    optimizer = make_adamw(model, lr=1e-3, weight_decay=0.1)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    ids = [id(p) for group in optimizer.param_groups for p in group["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters())), "each tensor once (the tied one too)"


def test_to_device_moves_nested_batches():
    batch = {"x": torch.zeros(2), "pair": (torch.ones(1), [torch.ones(3)]), "name": "b"}
    moved = to_device(batch, torch.device("meta"))
    assert moved["x"].is_meta and moved["pair"][0].is_meta and moved["pair"][1][0].is_meta and moved["name"] == "b"
    assert isinstance(moved["pair"], tuple) and isinstance(moved["pair"][1], list)


def test_to_device_keeps_a_named_tuple():
    batch = Seq2SeqBatch(torch.zeros(2, 3, dtype=torch.long), torch.tensor([3, 1]), torch.ones(2, 2), torch.ones(2, 2))
    moved = to_device(batch, torch.device("meta"))
    assert isinstance(moved, Seq2SeqBatch) and moved.src_lengths.is_meta and moved.tgt_out.shape == (2, 2)


# ------------------------------------------------------------------------------ checkpoints


def test_checkpoint_round_trip(tmp_path):
    cfg = quick_config(max_steps=3)
    model = fresh_model()
    optimizer = make_adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay)
    train(model, repeated_batch, language_model_loss, cfg, device="cpu", optimizer=optimizer, progress=False)
    path = tmp_path / "run" / "ckpt.pt"
    save_checkpoint(path, model, optimizer=optimizer, step=3, config=CFG)
    assert set(torch.load(path, weights_only=True)) == {"model", "step", "optimizer", "config"}

    restored = fresh_model(seed=1)
    restored_optimizer = make_adamw(restored, lr=cfg.lr, weight_decay=cfg.weight_decay)
    payload = load_checkpoint(path, restored, optimizer=restored_optimizer)
    tokens = repeated_batch()[0]
    with torch.no_grad():
        assert torch.equal(restored.eval()(tokens), model.eval()(tokens))
    assert payload["step"] == 3 and payload["config"] == {**dataclasses.asdict(CFG), "placement": "pre"}  # plain values
    original_state, state = optimizer.state_dict()["state"], restored_optimizer.state_dict()["state"]
    assert original_state.keys() == state.keys() and original_state
    for key, tensors in original_state.items():
        for name, value in tensors.items():
            assert torch.equal(state[key][name], value), f"optimizer state {key}.{name}"


def test_resuming_from_a_checkpoint_continues_the_same_run(tmp_path):
    cfg = quick_config(max_steps=6)
    straight = fresh_model()
    straight_history = train(straight, repeated_batch, language_model_loss, cfg, device="cpu", progress=False)

    first = fresh_model()
    optimizer = make_adamw(first, lr=cfg.lr, weight_decay=cfg.weight_decay)
    half = dataclasses.replace(cfg, max_steps=3)  # the same schedule needs the same max_steps: only stop early
    train(first, repeated_batch, language_model_loss, half, device="cpu", optimizer=optimizer, progress=False)
    save_checkpoint(tmp_path / "half.pt", first, optimizer=optimizer, step=3)

    resumed = fresh_model(seed=1)
    resumed_optimizer = make_adamw(resumed, lr=cfg.lr, weight_decay=cfg.weight_decay)
    step = load_checkpoint(tmp_path / "half.pt", resumed, optimizer=resumed_optimizer)["step"]
    history = train(resumed, repeated_batch, language_model_loss, cfg, device="cpu", optimizer=resumed_optimizer,
                    start_step=step, progress=False)
    assert history.steps == [3, 4, 5]
    assert history.train_loss == straight_history.train_loss[3:]
    for p, q in zip(resumed.parameters(), straight.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_run_stopped_and_resumed_is_the_run_of_one_call():
    cfg = quick_config(max_steps=6, eval_interval=2)
    straight = fresh_model()
    one_call = train(straight, repeated_batch, language_model_loss, cfg, device="cpu", val_batches=repeated_batch,
                     progress=False)
    parted = fresh_model()
    optimizer = make_adamw(parted, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    history = train(parted, repeated_batch, language_model_loss, cfg, device="cpu", val_batches=repeated_batch,
                    optimizer=optimizer, stop_at=4, progress=False)
    assert history.steps[-1] < 4 and history.train_seconds > 0
    before = history.train_seconds
    again = train(parted, repeated_batch, language_model_loss, cfg, device="cpu", val_batches=repeated_batch,
                  optimizer=optimizer, start_step=4, history=history, progress=False)
    assert again is history and history.train_seconds > before
    for field in ("steps", "train_loss", "lr", "eval_steps", "val_loss"):
        assert getattr(history, field) == getattr(one_call, field), field
    assert history.eval_seconds == sorted(history.eval_seconds)  # the training clock goes on across the parts
    for p, q in zip(parted.parameters(), straight.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("stop_at", [0, 7, True])
def test_stop_at_must_lie_after_the_start_and_within_the_schedule(stop_at):
    with pytest.raises(ValueError, match=r"stop_at must be an int in \(0, 6\]"):
        train(fresh_model(), repeated_batch, language_model_loss, quick_config(max_steps=6), device="cpu",
              stop_at=stop_at, progress=False)


def test_checkpoint_errors(tmp_path):
    model = fresh_model()
    save_checkpoint(tmp_path / "weights.pt", model)
    with pytest.raises(ValueError, match="no optimizer state"):
        load_checkpoint(tmp_path / "weights.pt", fresh_model(), optimizer=make_adamw(model, lr=1e-3, weight_decay=0.0))
    with pytest.raises(RuntimeError, match="size mismatch"):  # strict loading into a different architecture
        load_checkpoint(tmp_path / "weights.pt", GPT(CFG.replace(d_model=64)))


# ------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    "changes, argument",
    [
        ({"max_steps": 0}, "max_steps"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"eval_interval": 0}, "eval_interval"),
        ({"eval_batches": 0}, "eval_batches"),
        ({"log_interval": 0}, "log_interval"),
        ({"schedule": "linear"}, "schedule"),
        ({"lr": 0.0}, "lr"),
        ({"grad_clip": 0.0}, "grad_clip"),
    ],
)
def test_train_config_validation(changes, argument):
    with pytest.raises(ValueError, match=argument):
        TrainConfig(**{"max_steps": 10, "warmup_steps": 5, **changes})


def test_train_config_rejects_a_warmup_longer_than_the_run():
    with pytest.raises(ValueError, match="warmup_steps=100 must be <= max_steps=10"):
        TrainConfig(max_steps=10, warmup_steps=100)
    TrainConfig(max_steps=10, warmup_steps=100, schedule="constant")  # constant: a long warm-up is legitimate


def test_train_config_schedules():
    cfg = TrainConfig(max_steps=100, lr=1e-3, min_lr=1e-4, warmup_steps=10)
    assert cfg.lr_at(50) == warmup_cosine_lr(50, max_lr=1e-3, warmup_steps=10, total_steps=100, min_lr=1e-4)
    constant = dataclasses.replace(cfg, schedule="constant")
    assert constant.lr_at(50) == 1e-3
    noam = dataclasses.replace(cfg, schedule="noam", lr=2.0)
    assert noam.lr_at(9, d_model=512) == 2.0 * noam_lr(10, 512, 10)  # update 9 (0-based) is the paper's step 10
    with pytest.raises(ValueError, match="d_model"):
        noam.lr_at(9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
