"""The cache every recipe trains into: one file per setting, trained once, by one process at a time.

:func:`cached_model_path` names a recipe's file, ``<checkpoint_dir or the user cache>/<kind>_<hash>.pt``, after a hash
of everything that decides the model, so a recipe whose settings change never loads a stale model.
:func:`load_or_train` reads that file, or trains the model and writes it. It holds a file lock (``<file>.lock``) while
it trains, so that two processes never train the same model at once (two notebooks run side by side by nbval's
pytest-xdist workers, say): the second waits, then loads what the first saved. The file is written to a temporary
name in the same folder and renamed when complete, so a run that crashes leaves no partial file behind, and a process
that finds the file can read it without taking the lock. Files are read with ``weights_only=True``: tensors and
plain containers only, never arbitrary code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout

from tutorial_lib.data.shakespeare import default_cache_dir
from tutorial_lib.progress import announce, report
from tutorial_lib.training import save_atomically


def cached_model_path(kind: str, settings: tuple, checkpoint_dir: str | Path | None = None) -> Path:
    """``<checkpoint_dir or the user cache>/<kind>_<hash>.pt``, the hash of ``repr(settings)``: a recipe whose settings
    change never loads a stale model. Every ``load_or_train_*`` of the package names its file this way."""
    digest = hashlib.sha256(repr(settings).encode()).hexdigest()[:12]
    return Path(checkpoint_dir or default_cache_dir()) / f"{kind}_{digest}.pt"


def load_or_train(
    path: str | Path, train: Callable[[], dict[str, Any]], *, what: str, expected_seconds: float | None = None
) -> dict[str, Any]:
    """The payload saved at ``path``, or ``train()``'s, saved there first.

    ``train`` returns what the file keeps: a dict of tensors and plain containers (``torch.save``'s format, read back
    with ``weights_only=True``). While one process trains, the lock ``<path>.lock`` makes any other that asks for
    the same file wait (its progress line says so), then load the file instead of training again. Returns
    ``train()``'s payload itself when this call trained it (tensors not copied), the loaded one otherwise.

    One line announces ``what`` and ``expected_seconds`` (the training's time on the CI machine) whether the file is
    loaded or trained: the cell's output is the same either way, and so is the one nbval compares it with.
    """
    path = Path(path)
    with announce(f"{what[:1].upper()}{what[1:]} (from the cache, or trained now)", expected_seconds):
        lock = training_lock(path)
        if lock is None:
            return torch.load(path, map_location="cpu", weights_only=True)
        try:
            payload = train()
            save_atomically(payload, path)
            return payload
        finally:
            lock.release()


def training_lock(path: str | Path) -> FileLock | None:
    """The lock ``<path>.lock``, acquired (waiting while another process trains ``path``'s model), or None when the
    file exists, saved earlier or by the process that held the lock: then there is nothing to train. The caller trains,
    saves with ``save_atomically`` and releases the lock (:func:`load_or_train`, or a run trained over several calls)."""
    path = Path(path)
    if path.exists():  # written by os.replace, so a file that exists is complete: no lock needed to read it
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(f"{path}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        report(f"waiting for another process that is training it ({path.name})")
        lock.acquire()
    if path.exists():  # the process that held the lock saved it
        lock.release()
        return None
    return lock
