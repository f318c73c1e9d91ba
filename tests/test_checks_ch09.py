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


def test_a_loop_that_calls_the_packages_train_is_refused():
    from tutorial_lib.checks.ch09 import reference_train_model
    from tutorial_lib.training import TrainConfig, train

    def packages_loop(model, optimizer, train_batches, val_batches, loss_fn, *, max_steps, max_lr, min_lr,
                      warmup_steps, grad_clip, eval_interval, eval_batches):
        cfg = TrainConfig(max_steps=max_steps, lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps,
                          grad_clip=grad_clip, eval_interval=eval_interval, eval_batches=eval_batches, log_interval=1)
        history = train(model, train_batches, loss_fn, cfg, device="cpu", val_batches=val_batches,
                        optimizer=optimizer, progress=False)
        return history.train_loss, dict(zip(history.eval_steps, history.val_loss))

    assert check("09.training_loop", packages_loop).kind == "calls_the_work"
    assert check("09.training_loop", reference_train_model).points == 0  # the package's own code


def test_a_loop_that_returns_something_else_is_told_what_to_return():
    result = check("09.training_loop", lambda *args, **kwargs: [1.0, 2.0])
    assert result.points == 0 and "(train_losses, val_losses)" in result.verdict
