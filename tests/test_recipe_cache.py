"""The recipes' cache: one process trains a model while any other that asks for it waits, then loads it; a file is
written whole or not at all, and read back with ``weights_only=True``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from tutorial_lib.recipes.cache import cached_model_path, load_or_train

# Each process waits for the go file, so that both ask for the model while the first one still trains it (1 s).
WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path

    import torch

    from tutorial_lib.recipes.cache import load_or_train

    folder = Path(sys.argv[1])
    (folder / f"ready_{sys.argv[2]}").touch()
    while not (folder / "go").exists():
        time.sleep(0.01)


    def train():
        with open(folder / "trained.txt", "a") as counter:
            counter.write(f"{os.getpid()}\\n")
        time.sleep(1.0)
        return {"weights": torch.arange(6.0).view(2, 3) * os.getpid(), "record": {"pid": os.getpid(), "loss": [2.5]}}


    payload = load_or_train(folder / "model.pt", train, what="the test model")
    print(json.dumps({"weights": payload["weights"].tolist(), "record": payload["record"]}))
""")


def test_two_processes_train_once_and_both_get_the_model(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    workers = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(n)], cwd=tmp_path, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in range(2)]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready_{n}").exists() for n in range(2)):
            assert time.monotonic() < deadline and all(w.poll() is None for w in workers), "a worker did not start"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        outputs = [w.communicate(timeout=60) for w in workers]
    finally:
        for worker in workers:
            worker.kill()
    assert [w.returncode for w in workers] == [0, 0], [err for _, err in outputs]
    trained_by = (tmp_path / "trained.txt").read_text().split()
    assert len(trained_by) == 1  # trained exactly once
    payloads = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert payloads[0] == payloads[1] and payloads[0]["record"]["pid"] == int(trained_by[0])
    waited = [err for _, err in outputs if "waiting for another process that is training it (model.pt)" in err]
    assert len(waited) == 1  # the other one said what it waited for
    saved = torch.load(tmp_path / "model.pt", map_location="cpu", weights_only=True)
    assert saved["weights"].tolist() == payloads[0]["weights"] and saved["record"] == payloads[0]["record"]
    assert sorted(p.name for p in tmp_path.glob("*.pt*") if not p.name.endswith(".lock")) == ["model.pt"]


def test_a_saved_file_is_loaded_not_trained_again(tmp_path):
    path = tmp_path / "cache" / "model.pt"  # the folder is created
    calls = []

    def train() -> dict:
        calls.append(1)
        return {"model": {"w": torch.ones(2)}, "record": {"seconds": 1.5}}

    first = load_or_train(path, train, what="a model")
    second = load_or_train(path, train, what="a model")
    assert calls == [1] and torch.equal(first["model"]["w"], second["model"]["w"]) and second["record"] == {"seconds": 1.5}
    assert torch.load(path, weights_only=True)["record"] == {"seconds": 1.5}


class Crash(Exception):
    pass


def _lock_is_free(path: Path) -> bool:
    lock = FileLock(f"{path}.lock")
    lock.acquire(timeout=0)  # raises filelock.Timeout while another holder has it
    lock.release()
    return True


@pytest.mark.parametrize("payload", ["crash in train", {"not saveable": lambda: 0}], ids=["train", "save"])
def test_a_crash_leaves_no_file_and_frees_the_lock(tmp_path, payload):
    path = tmp_path / "model.pt"

    def train() -> dict:
        if payload == "crash in train":
            raise Crash
        return payload  # torch.save cannot pickle a lambda: the write fails half-way

    with pytest.raises(Exception) as error:
        load_or_train(path, train, what="a model")
    assert error.type is Crash if payload == "crash in train" else error.type is not Crash
    assert not path.exists() and not [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")]
    assert _lock_is_free(path)
    assert load_or_train(path, lambda: {"w": torch.zeros(1)}, what="a model")["w"].tolist() == [0.0]
    assert path.exists()


def test_file_names_hash_the_settings(tmp_path):
    path = cached_model_path("char_gpt", (1, "a"), tmp_path)
    assert path.parent == tmp_path and path.name.startswith("char_gpt_") and len(path.stem) == len("char_gpt_") + 12
    assert cached_model_path("char_gpt", (1, "a"), tmp_path) == path != cached_model_path("char_gpt", (2, "a"), tmp_path)


def test_the_character_gpt_is_trained_once_as_a_kept_run_and_loaded_after(tmp_path):
    from tutorial_lib.data.shakespeare import CharDataset
    from tutorial_lib.models.gpt import GPT, GPTConfig
    from tutorial_lib.recipes.char_gpt import char_gpt_checkpoint_path, char_run_path, load_or_train_char_gpt
    from tutorial_lib.training import TrainConfig, load_checkpoint

    generator = torch.Generator().manual_seed(0)
    words = ["the ", "king ", "and ", "queen ", "of ", "\n"]
    dataset = CharDataset.from_text("".join(words[i] for i in torch.randint(0, 6, (4000,), generator=generator).tolist()))
    cfg = GPTConfig(d_vocab=dataset.tokenizer.d_vocab, n_ctx=8, d_model=16, n_heads=2, n_layers=1)
    short = TrainConfig(max_steps=4, lr=3e-3, warmup_steps=2, eval_interval=2)
    trained = load_or_train_char_gpt(dataset, model_cfg=cfg, train_cfg=short, checkpoint_dir=tmp_path, progress=False)
    path = char_gpt_checkpoint_path(cfg, short, checkpoint_dir=tmp_path)
    assert sorted(tmp_path.glob("*.pt")) == sorted([path, char_run_path(cfg, short, checkpoint_dir=tmp_path)])
    loaded = load_or_train_char_gpt(dataset, model_cfg=cfg, train_cfg=short, checkpoint_dir=tmp_path)
    assert not loaded.training and all(torch.equal(a, b) for a, b in zip(trained.state_dict().values(),
                                                                         loaded.state_dict().values()))
    payload = load_checkpoint(path, GPT(cfg))  # training.save_checkpoint's format, read with weights_only=True
    assert payload["step"] == 4 and payload["config"]["d_model"] == 16


def test_the_character_gpt_trained_in_parts_is_the_model_of_one_call():
    from tutorial_lib.data.shakespeare import CharDataset
    from tutorial_lib.models.gpt import GPTConfig
    from tutorial_lib.recipes.char_gpt import CharGPTRun, train_char_gpt
    from tutorial_lib.training import TrainConfig

    generator = torch.Generator().manual_seed(0)
    words = ["the ", "king ", "and ", "queen ", "of ", "\n"]
    dataset = CharDataset.from_text("".join(words[i] for i in torch.randint(0, 6, (4000,), generator=generator).tolist()))
    cfg = GPTConfig(d_vocab=dataset.tokenizer.d_vocab, n_ctx=8, d_model=16, n_heads=2, n_layers=1)
    short = TrainConfig(max_steps=6, lr=3e-3, warmup_steps=2, eval_interval=2, log_interval=1)
    model, history = train_char_gpt(dataset, model_cfg=cfg, train_cfg=short, batch_size=4, progress=False)
    run = CharGPTRun(dataset, model_cfg=cfg, train_cfg=short, batch_size=4)
    run.train_until(3, progress=False)
    assert run.updates == 3 and run.history.eval_steps == [2]
    parts = run.train_until(progress=False)
    assert run.updates == 6 and (parts.steps, parts.train_loss, parts.val_loss) == (history.steps, history.train_loss,
                                                                                   history.val_loss)
    assert all(torch.equal(a, b) for a, b in zip(run.model.state_dict().values(), model.state_dict().values()))
