"""The ablation runner: each change removes what it says and nothing else; runs are deterministic and cached."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest
import torch
from torch import nn

from tutorial_lib.recipes import ablation
from tutorial_lib.recipes.ablation import (
    CHANGES,
    Change,
    UnscaledMultiHeadAttention,
    WithoutCausalMask,
    build_ablated_model,
    register_change,
    run_ablation,
    set_causal,
)
from tutorial_lib.data.shakespeare import CharDataset
from tutorial_lib.normalization import LayerNorm
from tutorial_lib.stats import compare_paired

TOKENS = torch.randint(65, (2, ablation.ABLATION_GPT_CONFIG.n_ctx), generator=torch.Generator().manual_seed(0))


def logits(model: nn.Module, tokens: torch.Tensor = TOKENS) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(tokens)


@pytest.fixture(scope="module")
def dataset() -> CharDataset:
    text = "".join(chr(ord("a") + (i * 7 + i // 13) % 26) for i in range(30_000)) + "".join(map(chr, range(65, 104)))
    return CharDataset.from_text(text)


def test_chapter_11s_changes_are_registered():
    assert {"baseline", "no_scaling", "no_causal_mask", "no_positions", "no_residuals", "no_norm", "no_ffn", "one_head",
            "post_norm", "no_warmup"} <= set(CHANGES)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_every_change_builds_a_model_that_runs(name):
    out = logits(build_ablated_model(name))
    assert out.shape == (*TOKENS.shape, 65) and out.isfinite().all()


def test_the_baseline_is_the_chapter_09_gpt_with_the_same_draws_for_every_seed():
    first, again = build_ablated_model("baseline", seed=3), build_ablated_model("baseline", seed=3)
    assert torch.equal(logits(first), logits(again))
    assert not torch.equal(logits(first), logits(build_ablated_model("baseline", seed=4)))


def test_surgery_keeps_every_weight_it_does_not_remove():
    baseline = build_ablated_model("baseline").state_dict()
    for name in ("no_scaling", "no_positions", "no_ffn", "no_norm", "no_residuals"):
        kept = build_ablated_model(name).state_dict()
        for key, value in kept.items():
            assert torch.equal(value, baseline[key]), (name, key)


def test_no_scaling_computes_unscaled_scores():
    attn = UnscaledMultiHeadAttention(16, 2)
    x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(1))
    q = attn.q_proj(x).view(1, 5, 2, 8).transpose(1, 2)
    k = attn.k_proj(x).view(1, 5, 2, 8).transpose(1, 2)
    v = attn.v_proj(x).view(1, 5, 2, 8).transpose(1, 2)
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)  # no / math.sqrt(8)
    expected = attn.out_proj((weights @ v).transpose(1, 2).reshape(1, 5, 16))
    assert torch.allclose(attn(x), expected, atol=1e-6)
    model = build_ablated_model("no_scaling")
    assert all(isinstance(block.attn, UnscaledMultiHeadAttention) for block in model.blocks)
    assert not torch.allclose(logits(model), logits(build_ablated_model("baseline")))


def test_without_the_causal_mask_the_past_reads_the_future_until_the_mask_is_switched_back_on():
    model = build_ablated_model("no_causal_mask")
    changed = TOKENS.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 65
    assert not torch.allclose(logits(model)[:, 0], logits(model, changed)[:, 0])  # position 0 sees the last token
    set_causal(model, True)
    assert torch.allclose(logits(model)[:, :-1], logits(model, changed)[:, :-1])
    assert torch.equal(logits(model), logits(build_ablated_model("baseline")))
    with pytest.raises(ValueError, match="not built by the 'no_causal_mask' change"):
        set_causal(build_ablated_model("baseline"), True)
    assert all(isinstance(block, WithoutCausalMask) for block in model.blocks)


def test_no_positions_makes_the_model_blind_to_order_at_the_first_layer():
    model = build_ablated_model("no_positions")
    assert model.pos_embed is None
    params = sum(p.numel() for p in model.parameters())
    cfg = ablation.ABLATION_GPT_CONFIG
    assert params == sum(p.numel() for p in build_ablated_model("baseline").parameters()) - cfg.n_ctx * cfg.d_model


def test_no_residuals_no_norm_and_no_ffn_remove_exactly_their_part():
    cfg = ablation.ABLATION_GPT_CONFIG
    no_norm = build_ablated_model("no_norm")
    assert not any(isinstance(m, (LayerNorm, nn.LayerNorm)) for m in no_norm.modules())
    no_ffn = build_ablated_model("no_ffn")
    removed = sum(p.numel() for p in build_ablated_model("baseline").parameters()) - sum(p.numel() for p in no_ffn.parameters())
    assert removed == cfg.n_layers * (2 * cfg.d_model * cfg.d_ff + cfg.d_ff + cfg.d_model + 2 * cfg.d_model)  # and its norm
    block = build_ablated_model("no_residuals").blocks[0]
    x = torch.randn(1, 4, cfg.d_model, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(block.attn_residual(x, block.ffn), block.ffn(block.attn_residual.norm(x)))


def test_a_change_is_validated_and_registered_once():
    with pytest.raises(ValueError, match="GPTConfig fields"):
        Change("wider", "wider", model={"width": 3})
    with pytest.raises(ValueError, match="TrainConfig fields"):
        Change("faster", "faster", train={"speed": 3})
    with pytest.raises(ValueError, match="identifier"):
        Change("no ffn", "a space")
    with pytest.raises(ValueError, match="already registered"):
        register_change(Change("baseline", "something else", model={"n_heads": 2}))
    with pytest.raises(ValueError, match="change must be a Change or one of"):
        run_ablation("no_such_change")


def test_a_run_is_deterministic_and_read_back_from_the_cache(dataset, tmp_path):
    kwargs = dict(steps=4, dataset=dataset, cache_dir=tmp_path)
    first = run_ablation("no_ffn", seed=1, **kwargs)
    assert len(list((tmp_path / "ablations").glob("no_ffn_seed1_*.pt"))) == 1
    cached = run_ablation("no_ffn", seed=1, **kwargs)
    fresh = run_ablation("no_ffn", seed=1, cache=False, **kwargs)
    assert first.val_loss == cached.val_loss == fresh.val_loss and first.train_loss == fresh.train_loss
    assert first.final_val_loss == fresh.final_val_loss and math.isfinite(first.final_val_loss)
    assert torch.equal(logits(first.model), logits(cached.model))
    assert first.eval_steps == [4] and first.n_parameters < run_ablation("baseline", seed=1, **kwargs).n_parameters
    other_seed = run_ablation("no_ffn", seed=2, **kwargs)
    assert other_seed.val_loss != first.val_loss


def test_a_readers_own_change_runs_and_is_cached_by_its_code(dataset, tmp_path):
    def halve_the_embedding(model):
        with torch.no_grad():
            model.embed.weight.mul_(0.5)

    change = Change("halved_embedding", "the token embedding at half its initial scale", surgery=halve_the_embedding)
    result = run_ablation(change, steps=3, dataset=dataset, cache_dir=tmp_path)
    assert result.change == "halved_embedding" and len(result.val_loss) == 1
    path = ablation.ablation_cache_path(change, seed=0, steps=3, dataset=dataset,
                                        train_cfg=ablation.ABLATION_TRAIN_CONFIG.__class__(
                                            **{**ablation.ABLATION_TRAIN_CONFIG.__dict__, "max_steps": 3, "warmup_steps": 3}),
                                        cache_dir=tmp_path)
    assert path.exists()


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_steps_must_be_a_positive_int(steps, dataset, tmp_path, without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match="steps must be a positive int"):
        run_ablation("baseline", steps=steps, dataset=dataset, cache_dir=tmp_path)


# --- reading the results (chapter 11) ---------------------------------------------------------------------------------


def test_the_chapters_rows_are_registered_in_order():
    assert ablation.CHAPTER_ROWS[0] == "baseline" and len(ablation.CHAPTER_ROWS) == 10
    assert set(ablation.CHAPTER_ROWS) <= set(CHANGES)


def test_within_noise_pairs_each_row_with_the_baselines_runs_of_the_same_seeds():
    baseline = [2.00, 2.10, 2.05, 2.20, 2.15]  # a large seed effect, shared by the rows
    shared = [b + d for b, d in zip(baseline, [0.011, 0.009, 0.010, 0.012, 0.008])]  # +0.010, t ≈ 14
    marks = ablation.within_noise(baseline, {"shared effect": shared, "same": list(baseline),
                                             "three seeds": [b - 0.02 for b in baseline[:3]],
                                             "diverged": [2.0, float("nan")]})
    assert marks == {"shared effect": False, "same": True, "three seeds": False, "diverged": False}
    # the baseline's own spread (σ ≈ 0.08) would call the shared effect noise: the paired rule does not
    assert abs(sum(shared) / 5 - sum(baseline) / 5) < 2 * statistics.stdev(baseline)


def test_within_noise_reads_the_t_interval_at_its_boundary():
    # differences with mean 1 and sample sd 1 over n = 5: the interval is 1 ± t·1/√5, holding 0 when t ≥ √5 = 2.236
    differences = [1 + x for x in (-1.2649110640673518, -0.6324555320336759, 0.0, 0.6324555320336759, 1.2649110640673518)]
    assert abs(statistics.stdev(differences) - 1) < 1e-12
    rows = {"row": [2.0 + d for d in differences]}
    baseline = [2.0] * 5
    assert ablation.within_noise(baseline, rows) == {"row": True}  # t(0.975, 4) = 2.776 > 2.236
    assert ablation.within_noise(baseline, rows, confidence=0.8) == {"row": False}  # t(0.9, 4) = 1.533
    comparison = compare_paired(baseline, rows["row"])
    assert comparison.low < 0 < comparison.high


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    (([2.0], {"a": [2.0, 2.1]}), {}, "baseline_losses must be a sequence of at least two"),
    (([2.0, float("nan")], {"a": [2.0, 2.1]}), {}, "baseline_losses must be a sequence of at least two finite"),
    (("22", {"a": [2.0, 2.1]}), {}, "baseline_losses"),
    (([2.0, 2.1], [2.0, 2.1]), {}, "row_losses must map row names"),
    (([2.0, 2.1], {"a": 2.0}), {}, r"row_losses\['a'\] must hold between 2 and 2 losses"),
    (([2.0, 2.1], {"a": [2.0]}), {}, r"row_losses\['a'\]"),
    (([2.0, 2.1], {"a": [2.0, 2.1, 2.2]}), {}, "paired with the baseline's"),
    (([2.0, 2.1], {"a": [2.0, 2.1]}), {"confidence": 95}, "confidence must be a number in"),
])
def test_within_noise_refuses_bad_input(args, kwargs, message, without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match=message):
        ablation.within_noise(*args, **kwargs)


def test_the_tables_run_is_the_reference_model_with_two_blocks():
    assert ablation.TABLE_GPT_CONFIG == ablation.ABLATION_GPT_CONFIG.replace(n_layers=2)
    assert ablation.TABLE_BATCH_SIZE < ablation.ABLATION_BATCH_SIZE and ablation.TABLE_STEPS < ablation.ABLATION_TRAIN_CONFIG.max_steps
    assert 0 < ablation.TABLE_CI_SECONDS_PER_UPDATE < ablation.ABLATION_CI_SECONDS_PER_UPDATE


def test_a_table_row_is_the_runner_at_the_tables_size(dataset, monkeypatch, without_annotation_checks):
    calls = []
    monkeypatch.setattr(ablation, "run_ablation", lambda change, **kwargs: calls.append((change, kwargs)) or "result")
    with without_annotation_checks():  # the stand-in returns a string, not an AblationResult
        assert ablation.run_table_row("gelu", seed=3, dataset=dataset) == "result"
        assert ablation.run_table_row("no_ffn", steps=800) == "result"
    assert calls == [
        ("gelu", dict(seed=3, steps=ablation.TABLE_STEPS, dataset=dataset, model_cfg=ablation.TABLE_GPT_CONFIG,
                      batch_size=ablation.TABLE_BATCH_SIZE, progress=False)),
        ("no_ffn", dict(seed=0, steps=800, dataset=None, model_cfg=ablation.TABLE_GPT_CONFIG,
                        batch_size=ablation.TABLE_BATCH_SIZE, progress=False)),
    ]


def test_the_gradient_probe_is_the_norm_of_each_blocks_gradient_and_clears_old_gradients():
    model = build_ablated_model("baseline").double()
    tokens, targets = TOKENS[:, :-1], TOKENS[:, 1:]
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    expected = []
    for block in model.blocks:
        params = list(block.parameters())
        grads = torch.autograd.grad(loss, params, retain_graph=True)
        expected.append(torch.cat([g.flatten() for g in grads]).norm())
    loss.backward()  # stale gradients: the probe must clear them
    norms = ablation.block_gradient_norms(model, tokens, targets)
    torch.testing.assert_close(norms, torch.stack(expected))
    assert norms.shape == (ablation.ABLATION_GPT_CONFIG.n_layers,) and not norms.requires_grad
    assert torch.equal(ablation.block_gradient_norms(model, tokens, targets), norms)  # called again: the same


def test_the_gradient_probe_refuses_bad_input(without_annotation_checks):
    model = build_ablated_model("baseline")
    with without_annotation_checks():
        with pytest.raises(ValueError, match="tokens and targets must both have shape"):
            ablation.block_gradient_norms(model, TOKENS, TOKENS[:, 1:])
        with pytest.raises(ValueError, match="ModuleList `blocks`"):
            ablation.block_gradient_norms(nn.Linear(3, 3), TOKENS, TOKENS)


def test_the_loss_by_position_averages_to_the_validation_loss(dataset):
    model = build_ablated_model("baseline")
    by_position = ablation.validation_loss_by_position(model, dataset, n_batches=2)
    assert by_position.shape == (ablation.ABLATION_GPT_CONFIG.n_ctx,) and model.training
    assert math.isclose(by_position.mean().item(), ablation.validation_loss(model, dataset, n_batches=2), rel_tol=1e-5)
    with pytest.raises(ValueError, match="n_batches must be a positive int"):
        ablation.validation_loss_by_position(model, dataset, n_batches=0)


def test_a_change_of_a_redefined_class_is_still_a_change(without_annotation_checks):
    @dataclasses.dataclass(frozen=True)
    class NotebookChange:  # what a build cell or a reloaded module defines: the same fields, another class
        name: str
        description: str
        model: dict = dataclasses.field(default_factory=dict)
        train: dict = dataclasses.field(default_factory=dict)
        surgery: object = None
        build: object = None

        def fingerprint(self) -> str:
            return Change.fingerprint(self)

    change = NotebookChange("two_heads", "two heads", model={"n_heads": 2})
    with without_annotation_checks():  # notebooks run unchecked; the annotation names the package's class
        assert ablation.resolve_change(change) is change and ablation.resolve_change("no_ffn") is CHANGES["no_ffn"]
        assert build_ablated_model(change).cfg.n_heads == 2
        with pytest.raises(ValueError, match="change must be a Change or one of"):
            ablation.resolve_change(3)
