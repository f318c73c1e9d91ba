"""Training: learning-rate schedules (Eq. (3), warmup-cosine), label smoothing (§5.4), a model-agnostic training
loop with AdamW, gradient clipping, evaluation, a progress line and checkpoints (chapters 07, 09)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from tutorial_lib.attention import causal_mask
from tutorial_lib.progress import announce, report

# ----------------------------------------------------------------------------------------------- schedules


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """Eq. (3): lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5); linear warm-up, then 1/√step decay.

    ``step`` counts from 1 as in the paper; step 0 (before any update) gives 0.
    """
    _check_int("step", step, minimum=0)
    _check_int("d_model", d_model, minimum=1)
    _check_int("warmup", warmup, minimum=1)
    if step == 0:
        return 0.0
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def warmup_cosine_lr(step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """Linear warm-up to ``max_lr`` over ``warmup_steps``, then a half cosine down to ``min_lr`` at ``total_steps``."""
    _check_int("step", step, minimum=0)
    _check_int("warmup_steps", warmup_steps, minimum=0)
    _check_int("total_steps", total_steps, minimum=1)
    if warmup_steps > total_steps:
        raise ValueError(f"warmup_steps={warmup_steps} must be <= total_steps={total_steps}")
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def constant_lr(step: int, *, max_lr: float, warmup_steps: int = 0) -> float:
    """``max_lr`` after an optional linear warm-up."""
    _check_int("step", step, minimum=0)
    return max_lr * min(1.0, (step + 1) / warmup_steps) if warmup_steps else max_lr


# ------------------------------------------------------------------------------------------ label smoothing


def label_smoothing_loss(
    logits: Float[Tensor, "batch seq d_vocab"],
    targets: Int[Tensor, "batch seq"],
    smoothing: float = 0.1,
    ignore_index: int | None = None,
) -> Float[Tensor, ""]:
    """§5.4's label smoothing (ε_ls = 0.1): cross-entropy against the target ``(1 - ε)·one_hot + ε/d_vocab``.

    The same definition as ``F.cross_entropy(label_smoothing=ε)``: the ε mass is spread over every class, the
    target included. Positions whose target is ``ignore_index`` (padding) do not count.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    keep = torch.ones_like(targets, dtype=torch.bool) if ignore_index is None else targets != ignore_index
    safe_targets = targets.masked_fill(~keep, 0)
    nll = -log_probs.gather(-1, safe_targets[..., None]).squeeze(-1)  # the one-hot part
    uniform = -log_probs.mean(dim=-1)  # cross-entropy against the uniform distribution
    loss = (1 - smoothing) * nll + smoothing * uniform
    return loss[keep].mean()


def language_model_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Next-token cross-entropy for a model mapping ``(batch, seq)`` tokens to logits; batch is ``(x, y)``."""
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


# ------------------------------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (the model's architecture is its own config)."""

    max_steps: int
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    schedule: str = "warmup_cosine"  # "warmup_cosine" | "constant" | "noam"
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = 1.0
    eval_interval: int = 250
    eval_batches: int = 20
    log_interval: int = 10

    def __post_init__(self) -> None:
        _check_int("max_steps", self.max_steps, minimum=1)
        _check_int("warmup_steps", self.warmup_steps, minimum=0)
        _check_int("eval_interval", self.eval_interval, minimum=1)
        _check_int("eval_batches", self.eval_batches, minimum=1)
        _check_int("log_interval", self.log_interval, minimum=1)
        if self.schedule not in ("warmup_cosine", "constant", "noam"):
            raise ValueError(f"schedule must be 'warmup_cosine', 'constant' or 'noam', got {self.schedule!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip!r}")
        if self.schedule == "warmup_cosine" and self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be <= max_steps={self.max_steps}")

    def lr_at(self, step: int, d_model: int | None = None) -> float:
        """The learning rate of update ``step`` (0-based). For "noam", ``lr`` scales Eq. (3) and ``d_model`` is needed."""
        if self.schedule == "warmup_cosine":
            return warmup_cosine_lr(step, max_lr=self.lr, warmup_steps=self.warmup_steps, total_steps=self.max_steps, min_lr=self.min_lr)
        if self.schedule == "constant":
            return constant_lr(step, max_lr=self.lr, warmup_steps=self.warmup_steps)
        if d_model is None:
            raise ValueError("the 'noam' schedule needs d_model")
        return self.lr * noam_lr(step + 1, d_model, max(1, self.warmup_steps))


@dataclass
class TrainHistory:
    """What happened during a run: one row per logged step and per evaluation."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    eval_seconds: list[float] = field(default_factory=list)  # training time (evaluation excluded) at each evaluation
    seconds: float = 0.0  # wall time of the whole run, evaluation included
    train_seconds: float = 0.0  # training time so far, evaluation excluded (where a resumed run's clock goes on)

    @property
    def final_val_loss(self) -> float:
        if not self.val_loss:
            raise ValueError("no evaluation was run")
        return self.val_loss[-1]


def make_adamw(model: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95)) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: biases, norm gains and 1-D parameters are not decayed."""
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel updates every tensor, instead of a dozen small ops per tensor (CPU and CUDA have one).
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused)


@torch.no_grad()
def evaluate(model: nn.Module, batches: Callable[[], Any], loss_fn: Callable[[nn.Module, Any], Tensor], n_batches: int, device: torch.device | str) -> float:
    """Mean loss over ``n_batches`` batches, in eval mode (no dropout); the model's mode is restored."""
    was_training = model.training
    model.eval()
    try:
        total = sum(loss_fn(model, to_device(batches(), device)).item() for _ in range(n_batches))
    finally:
        model.train(was_training)
    return total / n_batches


def train(
    model: nn.Module,
    train_batches: Callable[[], Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    cfg: TrainConfig,
    *,
    device: torch.device | str,
    val_batches: Callable[[], Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    d_model: int | None = None,
    callbacks: Iterable[Callable[[str, dict], None]] = (),
    progress: bool = True,
    start_step: int = 0,
    precision: str = "fp32",
    expected_seconds: float | None = None,
    stop_at: int | None = None,
    history: TrainHistory | None = None,
) -> TrainHistory:
    """Train any model: it knows nothing of the model but ``loss_fn(model, batch) -> scalar loss``.

    ``train_batches()`` / ``val_batches()`` return one batch (a tensor or a tuple of tensors) each call; batches are
    moved to ``device``. Each update: lr from the schedule, forward, backward, gradient clipping, AdamW step.
    Every ``eval_interval`` steps and at the end the validation loss is measured. ``callbacks`` get
    ``("step", info)`` and ``("eval", info)`` events; ``info["seconds"]`` is the training time so far, evaluation
    excluded. ``progress`` shows a line that says what trains (and ``expected_seconds``, its time on the CI machine)
    and, in Jupyter, how far it has got (:mod:`tutorial_lib.progress`). ``precision="bf16"`` runs the training
    updates' forward in bfloat16 (:func:`precision_context`); evaluation stays in fp32. Returns the
    :class:`TrainHistory`.

    ``stop_at`` ends the call after that update (the schedule is still ``cfg``'s, to ``cfg.max_steps``). A later call
    with ``start_step=stop_at``, the same ``optimizer`` and batches and the ``history`` it returned goes on where it
    stopped, appending to that history: a run in parts gives the model of one call, bit for bit.
    """
    stop_at = cfg.max_steps if stop_at is None else stop_at
    if isinstance(stop_at, bool) or not isinstance(stop_at, int) or not start_step < stop_at <= cfg.max_steps:
        raise ValueError(f"stop_at must be an int in ({start_step}, {cfg.max_steps}] (after start_step, at most "
                         f"cfg.max_steps), got {stop_at!r}")
    model.to(device)
    model.train()
    optimizer = optimizer or make_adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    history = TrainHistory() if history is None else history
    callbacks = list(callbacks)
    start = time.perf_counter()
    evaluating = 0.0  # seconds spent measuring the validation loss, kept out of the training time
    # One line says what runs and how far it has got (tutorial_lib.progress): the recipe's line when a recipe announced
    # this run, else (with progress) a line of its own; report() refreshes it, and does nothing when there is none.
    shown = announce(f"Training {stop_at - start_step} updates", expected_seconds)
    with shown if progress else contextlib.nullcontext():
        for step in range(start_step, stop_at):
            lr = cfg.lr_at(step, d_model)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with precision_context(precision, device):
                loss = loss_fn(model, to_device(train_batches(), device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            last = step == cfg.max_steps - 1
            if step % cfg.log_interval == 0 or last:
                loss_value = loss.item()
                history.steps.append(step)
                history.train_loss.append(loss_value)
                history.lr.append(lr)
                report(f"update {step + 1} of {cfg.max_steps}, training loss {loss_value:.3f}")
                for callback in callbacks:
                    callback("step", {"step": step, "loss": loss_value, "lr": lr})
            if val_batches is not None and ((step + 1) % cfg.eval_interval == 0 or last):
                eval_start = time.perf_counter()
                train_seconds = history.train_seconds + eval_start - start - evaluating
                val = evaluate(model, val_batches, loss_fn, cfg.eval_batches, device)
                evaluating += time.perf_counter() - eval_start
                history.eval_steps.append(step + 1)
                history.val_loss.append(val)
                history.eval_seconds.append(train_seconds)
                for callback in callbacks:
                    callback("eval", {"step": step + 1, "val_loss": val, "train_loss": loss.item(), "seconds": train_seconds})
    end = time.perf_counter()
    history.seconds += end - start
    history.train_seconds += end - start - evaluating
    return history


def precision_context(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """What a forward runs in: ``"fp32"`` as written, or ``"bf16"``, where ``torch.autocast`` runs the matrix
    products in bfloat16 (8 bits of mantissa instead of 23; the weights, the optimizer and the losses stay fp32).

    On a CPU this pays only where the cores multiply bfloat16 natively (AVX512-BF16 or AMX; 2.2× the fp32 matmul rate
    on the AMD EPYC CI machine), and elsewhere it is refused. There, attention stays in fp32: PyTorch's fused CPU
    kernel runs its backward in bfloat16 three times slower than in fp32 (measured in ``benchmarks/README.md``). The
    chapters train in fp32, the precision of their stored outputs; ``benchmarks/train_char_gpt.py --precision bf16``
    measures this one."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision != "bf16":
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
    device_type = torch.device(device).type
    if device_type != "cpu":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise ValueError("precision='bf16' needs a CPU that multiplies bfloat16 natively (AVX512-BF16 or AMX); "
                         "this one would emulate it, slower than fp32: use precision='fp32'")
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    stack.enter_context(_CpuBf16Attention())
    return stack


class _CpuBf16Attention(torch.overrides.TorchFunctionMode):
    """How ``F.scaled_dot_product_attention`` runs under a CPU bfloat16 autocast (see :func:`precision_context`).

    PyTorch's fused CPU kernel runs its backward in bfloat16 three times slower than in fp32. For short causal or
    unmasked self-attention (the training path), the scores are materialised instead: two batched matmuls in bfloat16
    and the softmax in fp32 (10% faster per update than the fused kernel in fp32 at n_ctx = 64). Anything else (a
    mask, dropout, a scale, long sequences) runs the fused kernel in fp32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q, k, v, *rest = args
        plain = not rest and set(kwargs) <= {"is_causal"} and q.dim() == 4 and q.shape[-2] == k.shape[-2] <= 256
        if not plain:
            with torch.autocast("cpu", enabled=False):
                return func(q.float(), k.float(), v.float(), *rest, **kwargs)
        *batch, n, d_head = q.shape
        scores = torch.zeros(n, n, dtype=q.dtype)  # the mask as an additive bias: 0 where a query may look, else -inf
        if kwargs.get("is_causal"):
            scores = scores.masked_fill(~causal_mask(n), float("-inf"))
        scores = torch.baddbmm(scores, q.reshape(-1, n, d_head), k.reshape(-1, n, d_head).transpose(1, 2),
                               alpha=d_head**-0.5)
        return torch.bmm(scores.softmax(dim=-1), v.reshape(-1, n, v.shape[-1])).view(*batch, n, v.shape[-1])


def to_device(batch: Any, device: torch.device | str) -> Any:
    """Move a tensor, or a tuple/list/dict of tensors, to ``device``."""
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple takes its fields one by one
        return type(batch)(*(to_device(b, device) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


# -------------------------------------------------------------------------------------------- checkpoints


def save_checkpoint(path: str | Path, model: nn.Module, *, optimizer: torch.optim.Optimizer | None = None, step: int = 0, config: Any = None) -> None:
    """Save weights (and optimizer state, step, the model's config as a plain dict) to ``path``.

    Written to a temporary file and renamed: a process that reads ``path`` meanwhile (another notebook) finds the old
    file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"model": model.state_dict(), "step": step}
    if optimizer is not None:
        payload["optimizer"] = optimizer.state_dict()
    if config is not None:
        payload["config"] = {k: getattr(v, "value", v) for k, v in dataclasses.asdict(config).items()}
    save_atomically(payload, path)


def save_atomically(payload: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, renamed to ``path`` once complete: whoever reads ``path``
    finds the old file or the new one, never half of one, and a failed save leaves nothing behind."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(payload, file)
        os.chmod(temporary, 0o644)  # mkstemp's file is private (0o600); torch.save's own would be readable
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path, model: nn.Module, *, optimizer: torch.optim.Optimizer | None = None, map_location: Any = "cpu") -> dict:
    """Load a checkpoint written by :func:`save_checkpoint` into ``model`` (strictly) and ``optimizer``.

    ``weights_only=True``: only tensors and plain containers are unpickled, never arbitrary code.
    Returns the payload (``step``, ``config``, ...).
    """
    payload = torch.load(Path(path), map_location=map_location, weights_only=True)
    model.load_state_dict(payload["model"], strict=True)
    if optimizer is not None:
        if "optimizer" not in payload:
            raise ValueError(f"{path} holds no optimizer state")
        optimizer.load_state_dict(payload["optimizer"])
    return payload


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
