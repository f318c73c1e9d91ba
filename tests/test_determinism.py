"""Same machine, same numbers: seeded training repeats bit for bit, on the notebooks' one thread and on two.

The stored notebook outputs depend on it (nbval compares them byte for byte, with one-thread kernels, two notebooks
side by side; a model in the shared cache must be the same whichever notebook trained it). The classic
culprit is a backward pass that accumulates into shared rows from several threads in whatever order they finish:
indexing's backward (``weight[tokens]``) does; ``F.embedding``'s does not.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from tutorial_lib.embeddings import TokenEmbedding
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import TrainConfig, language_model_loss, train

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_THREADS = 1  # tools/execute_notebooks.py's and the Makefile's OMP_NUM_THREADS for notebook kernels
THREAD_COUNTS = (NOTEBOOK_THREADS, 2)  # and the CI machine's 2 cores (benchmarks, a reader's run)


def test_stored_outputs_and_nbval_use_the_same_thread_count():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import execute_notebooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    notebook_env = re.search(r"^NOTEBOOK_ENV := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    assert f"OMP_NUM_THREADS={NOTEBOOK_THREADS}" in notebook_env.split()
    assert execute_notebooks.KERNEL_ENV["OMP_NUM_THREADS"] == str(NOTEBOOK_THREADS)


def with_threads(n: int, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", THREAD_COUNTS)
def test_token_embedding_gradient_repeats_bit_for_bit(threads):
    tokens = torch.randint(0, 65, (64, 64), generator=torch.Generator().manual_seed(0))  # many repeats of each row
    upstream = torch.randn(64, 64, 128, generator=torch.Generator().manual_seed(1))

    def gradient():
        torch.manual_seed(0)
        embed = TokenEmbedding(65, 128)
        embed(tokens).backward(upstream)
        return embed.weight.grad

    first = with_threads(threads, gradient)
    for _ in range(10):
        assert torch.equal(with_threads(threads, gradient), first)


@pytest.mark.parametrize("threads", THREAD_COUNTS)
def test_gpt_training_repeats_bit_for_bit(threads):
    cfg = GPTConfig(d_vocab=65, n_ctx=32, d_model=64, n_heads=4, n_layers=2, fast_attention=True, fast_norm=True)
    train_cfg = TrainConfig(max_steps=5, lr=3e-3, warmup_steps=0)

    def run():
        torch.manual_seed(0)
        model = GPT(cfg)
        batches = torch.Generator().manual_seed(0)
        train(model, lambda: tuple(torch.randint(0, 65, (2, 32, 32), generator=batches)), language_model_loss,
              train_cfg, device="cpu", progress=False)
        return [p.detach().clone() for p in model.parameters()]

    first = with_threads(threads, run)
    for _ in range(3):
        assert all(torch.equal(a, b) for a, b in zip(with_threads(threads, run), first, strict=True))
