"""Training in bfloat16 (training.precision_context): refused where it would be emulated, close to fp32 where native."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import TrainConfig, language_model_loss, precision_context, train

NATIVE_BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
needs_bf16 = pytest.mark.skipif(not NATIVE_BF16, reason="this CPU has no native bfloat16 (AVX512-BF16 or AMX)")


def test_fp32_changes_nothing():
    with precision_context("fp32", "cpu"):
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("bad", ["bf32", "float16", None])
def test_an_unknown_precision_is_named(bad, without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match="precision must be 'fp32' or 'bf16'"):
        precision_context(bad, "cpu")


def test_bf16_is_refused_where_the_cpu_would_emulate_it(monkeypatch):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    with pytest.raises(ValueError, match="natively"):
        precision_context("bf16", "cpu")


def attention_and_gradients(precision: str, **kwargs) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=generator, requires_grad=True) for _ in range(3))
    with precision_context(precision, "cpu"):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    out.float().pow(2).sum().backward()
    return [out.float(), q.grad, k.grad, v.grad]


@needs_bf16
@pytest.mark.parametrize("kwargs", [{"is_causal": True}, {}, {"attn_mask": torch.ones(16, 16, dtype=torch.bool).tril()}])
def test_bf16_attention_matches_fp32_within_bfloat16_rounding(kwargs):
    for ours, reference in zip(attention_and_gradients("bf16", **kwargs), attention_and_gradients("fp32", **kwargs)):
        scale = reference.abs().max()
        assert (ours - reference).abs().max() <= 0.03 * scale  # bfloat16 keeps 8 bits of mantissa: 2^-8 ≈ 0.004


@needs_bf16
def test_the_matrix_products_run_in_bf16_and_the_weights_stay_fp32():
    layer = torch.nn.Linear(8, 8)
    with precision_context("bf16", "cpu"):
        assert layer(torch.randn(3, 8)).dtype == torch.bfloat16
    assert layer.weight.dtype == torch.float32


@needs_bf16
def test_a_bf16_run_learns_like_an_fp32_one():
    cfg = GPTConfig(d_vocab=11, n_ctx=16, d_model=32, n_heads=4, n_layers=2, fast_attention=True, fast_norm=True)
    train_cfg = TrainConfig(max_steps=60, lr=3e-3, warmup_steps=5, eval_interval=60, log_interval=60)
    sequence = torch.arange(1000).remainder(11)  # 0, 1, …, 10, 0, 1, …: the next token follows from the last one

    def run(precision: str) -> float:
        torch.manual_seed(0)
        model = GPT(cfg)
        batches = torch.Generator().manual_seed(0)

        def batch():
            starts = torch.randint(0, 1000 - 17, (8,), generator=batches)
            windows = torch.stack([sequence[start : start + 17] for start in starts.tolist()])
            return windows[:, :-1], windows[:, 1:]

        history = train(model, batch, language_model_loss, train_cfg, device="cpu", val_batches=batch,
                        progress=False, precision=precision)
        return history.final_val_loss

    fp32, bf16 = run("fp32"), run("bf16")
    assert fp32 < 1.0 and abs(bf16 - fp32) < 0.1
