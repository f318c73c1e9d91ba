"""Checks compare with a tolerance per device: a correct float32 answer computed on CUDA or MPS passes, and the CPU's
own tolerance stays as tight as torch.testing.assert_close's."""

from __future__ import annotations

import torch

from tutorial_lib.checks.compare import DEVICE_TOLERANCES, TOLERANCES, tolerance_for


def test_the_cpu_keeps_assert_closes_tolerance_and_accelerators_are_looser():
    assert tolerance_for(torch.float32, "cpu") == TOLERANCES[torch.float32]
    for device_type in ("cuda", "mps"):
        rtol, atol = tolerance_for(torch.float32, device_type)
        assert rtol > TOLERANCES[torch.float32][0] and atol >= TOLERANCES[torch.float32][1]


def test_an_exercises_own_tolerance_is_kept_on_the_cpu_and_floored_on_an_accelerator():
    assert tolerance_for(torch.float32, "cpu", (0.0, 0.0)) == (0.0, 0.0)
    assert tolerance_for(torch.float32, "mps", (0.0, 0.0)) == DEVICE_TOLERANCES["mps"][torch.float32]
    assert tolerance_for(torch.float32, "cuda", (0.1, 0.1)) == (0.1, 0.1)  # looser than the floor: kept


def test_an_answer_off_by_a_gpus_rounding_passes_there_and_not_on_the_cpu():
    want = torch.linspace(1, 2, 100)
    got = want * (1 + 5e-5)  # the order of a float32 reduction summed differently
    rtol, atol = tolerance_for(torch.float32, "cpu")
    assert not torch.isclose(got, want, rtol=rtol, atol=atol).all()
    for device_type in ("cuda", "mps"):
        rtol, atol = tolerance_for(torch.float32, device_type)
        assert torch.isclose(got, want, rtol=rtol, atol=atol).all()
