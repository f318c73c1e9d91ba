"""What every notebook does first: seed everything, pick a device (chapter 00)."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (all devices); returns a CPU ``torch.Generator`` seeded the same way."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA and MPS
    return torch.Generator().manual_seed(seed)


def pick_device(prefer: str | None = None) -> torch.device:
    """The fastest device present: CUDA, then Apple's MPS, then the CPU.

    ``prefer`` (or the environment variable ``TUTORIAL_LIB_DEVICE``) forces one, e.g. ``"cpu"`` for
    byte-stable outputs.
    """
    prefer = prefer or os.environ.get("TUTORIAL_LIB_DEVICE")
    if prefer:
        device = torch.device(prefer)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"prefer={prefer!r} but no CUDA device is available")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"prefer={prefer!r} but no MPS device is available")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def setup_notebook(seed: int = 0) -> torch.Generator:
    """Seed everything, make printed tensors short and stable, and register the ``%%my_transformer`` cell magic of the
    build exercises (:mod:`tutorial_lib.build_track`); the first cell of every notebook calls this."""
    from tutorial_lib.build_track import register_magic

    register_magic()
    torch.set_printoptions(precision=4, sci_mode=False, linewidth=110)
    np.set_printoptions(precision=4, suppress=True, linewidth=110)
    return seed_everything(seed)
