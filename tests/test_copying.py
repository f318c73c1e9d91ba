"""The copying task of chapter 13: the sequences, the targets that are scored, the loss and the accuracy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tutorial_lib.data.copying import IGNORE_INDEX, copy_accuracy, copy_batch, copy_loss


def test_a_batch_is_a_string_a_separator_and_its_copy() -> None:
    x, y = copy_batch(4, 6, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 12)
    assert (x[:, 6] == 10).all() and x[:, :6].max() < 10
    assert torch.equal(x[:, 7:], x[:, :5])  # the copy, fed back one position late
    assert (y[:, :6] == IGNORE_INDEX).all()
    assert torch.equal(y[:, 6:], x[:, :6])  # from the separator on, predict the string again
    again = copy_batch(4, 6, 10, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], x)
    with pytest.raises(ValueError, match="length"):
        copy_batch(4, 0, 10, torch.Generator())


class _Oracle(nn.Module):
    """Reads the answer off its own input: position p >= length predicts the token at p - length."""

    def __init__(self, length: int, d_vocab: int) -> None:
        super().__init__()
        self.length, self.d_vocab = length, d_vocab

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        answer = torch.cat([x[:, : self.length], x[:, : self.length]], dim=1)
        return torch.nn.functional.one_hot(answer, self.d_vocab).float() * 50.0


def test_a_model_that_copies_gets_full_marks_and_no_loss() -> None:
    batch = copy_batch(8, 5, 7, torch.Generator().manual_seed(1))
    oracle = _Oracle(5, 8)
    assert copy_accuracy(oracle, batch) == (1.0, 1.0)
    assert copy_loss(oracle, batch).item() < 1e-6
    wrong_once = batch[0].clone()
    wrong_once[0, 0] = (wrong_once[0, 0] + 1) % 7  # the oracle now copies a wrong symbol in the first sequence
    token, exact = copy_accuracy(oracle, (wrong_once, batch[1]))
    assert exact == pytest.approx(7 / 8) and token == pytest.approx(1 - 1 / 40)
