"""Chapter 09's prediction: the loss before training is that of a uniform guess, ln 65."""

from __future__ import annotations

import math

from tutorial_lib.checks import check


def test_the_initial_loss_is_close_to_a_uniform_guess(predict):
    from tutorial_lib.checks.ch09 import initial_loss

    assert abs(initial_loss() - math.log(65)) < 0.05
    assert predict("09.predict_initial_loss", lambda: math.log(65)).passed
    assert predict("09.predict_initial_loss", lambda: math.log2(65)).mistake == "bits_not_nats"
    assert predict("09.predict_initial_loss", lambda: 3.3).mistake == "unigram_entropy"
