"""The build track: ``%%my_transformer`` cells save the learner's pieces as files that later notebooks import."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tutorial_lib.build_track import PACKAGE, WRITTEN_BY, load_module, require, save_module
from tutorial_lib.checks import check

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_imports():
    """Leave no my_transformer module, and no folder of it on sys.path, to the tests after this one."""
    path = list(sys.path)
    yield
    sys.path[:] = path
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


@pytest.mark.usefixtures("fresh_imports")
def test_a_saved_cell_is_a_module_and_a_second_run_replaces_the_first(tmp_path):
    path = save_module("attention", "def answer():\n    return 1\n\n\n", tmp_path)
    assert path == tmp_path / PACKAGE / "attention.py" and path.read_text() == "def answer():\n    return 1\n"
    assert (tmp_path / PACKAGE / "__init__.py").exists()
    assert load_module("attention", tmp_path).answer() == 1
    stamp = path.stat().st_mtime_ns
    save_module("attention", "def answer():\n    return 1\n", tmp_path)  # the same text: the file is left alone
    assert path.stat().st_mtime_ns == stamp
    save_module("attention", "def answer():\n    return 2\n", tmp_path)
    assert load_module("attention", tmp_path).answer() == 2
    assert list((tmp_path / PACKAGE).glob("*.tmp")) == []  # written through a temporary file, then renamed


@pytest.mark.usefixtures("fresh_imports")
def test_another_folders_package_is_not_reused(tmp_path):
    for folder, value in (("a", 1), ("b", 2)):
        save_module("piece", f"VALUE = {value}\n", tmp_path / folder)
    assert load_module("piece", tmp_path / "a").VALUE == 1
    assert load_module("piece", tmp_path / "b").VALUE == 2


def test_a_missing_file_names_the_exercise_that_writes_it(tmp_path):
    save_module("attention", "X = 1\n", tmp_path)
    require("attention", folder=tmp_path)
    with pytest.raises(FileNotFoundError) as error:
        require("attention", "multi_head", folder=tmp_path)
    message = str(error.value)
    assert "my_transformer/multi_head.py: written by chapter 04, exercise 3" in message
    assert "attention.py" not in message and "Colab" in message
    with pytest.raises(ValueError, match="name must be a module name"):
        save_module("my-attention", "X = 1\n", tmp_path)


@pytest.mark.usefixtures("fresh_imports")
def test_the_cell_magic_saves_runs_and_defines_the_names(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from tutorial_lib.build_track import register_magic

    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    try:
        assert register_magic()
        result = shell.run_cell("%%my_transformer piece\nimport math\n\n\ndef double(x):\n    return 2 * x\n")
        assert result.success, result.error_in_exec
        assert shell.user_ns["double"](3) == 6 and shell.user_ns["double"].__module__ == f"{PACKAGE}.piece"
        assert (tmp_path / PACKAGE / "piece.py").read_text().startswith("import math")
        failing = shell.run_cell("%%my_transformer piece\ndef double(x):\n    return 2 * y\n\n\ndouble(1)\n")
        assert isinstance(failing.error_in_exec, NameError)  # the learner's error, raised from their file
    finally:
        InteractiveShell.clear_instance()


def test_every_file_of_the_track_is_committed_in_both_folders_and_named_in_the_registry():
    for folder in ("solutions", "exercises"):
        files = {path.stem for path in (ROOT / folder / PACKAGE).glob("*.py")} - {"__init__"}
        assert files == set(WRITTEN_BY), folder
    stub = (ROOT / "exercises" / PACKAGE / "multi_head.py").read_text()
    assert "raise NotImplementedError" in stub and "BEGIN SOLUTION" not in stub


@pytest.mark.usefixtures("fresh_imports")
@pytest.mark.parametrize(("name", "answer", "exercise_id"), [
    ("embeddings", "TokenEmbedding", "02.token_embedding"),
    ("embeddings", "PositionEmbedding", "02.position_embedding"),
    ("multi_head", "MultiHeadAttention", "04.multi_head_attention"),
    ("training", "train_model", "09.training_loop"),
    ("cached_attention", "cached_attention", "10.kv_cache_attention"),
    ("cached_gpt", "CachedGPT", "10.cached_gpt"),
    ("transformer", "Transformer", "07.transformer_module"),
    ("bert", "BERT", "14.bert_module"),
    ("ablated_gpt", "AblatedGPT", "11.ablated_gpt"),
])
def test_the_solutions_files_pass_their_checks_and_the_stubs_score_nothing(name, answer, exercise_id):
    for folder, passed in (("solutions", True), ("exercises", False)):
        for loaded in [loaded for loaded in sys.modules if loaded == PACKAGE or loaded.startswith(f"{PACKAGE}.")]:
            del sys.modules[loaded]
        module = load_module(name, ROOT / folder)
        result = check(exercise_id, getattr(module, answer))
        assert result.passed is passed, result.verdict
        if not passed:
            assert result.kind == "not_attempted"
