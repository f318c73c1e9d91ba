"""The progress line of cells that train (tutorial_lib.progress): what it says, and that nbval can compare it."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from tutorial_lib import progress
from tutorial_lib.progress import announce, describe_seconds, report
from tutorial_lib.training import TrainConfig, language_model_loss, train

REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("seconds", "words"), [(0.2, "about 1 s"), (7.4, "about 7 s"), (42, "about 40 s"), (88, "about 90 s"), (200, "about 3 min")]
)
def test_durations_read_as_a_reader_wants_them(seconds, words):
    assert describe_seconds(seconds) == words


@pytest.fixture
def machine_three_times_slower(monkeypatch):
    """This machine measured at a third of the reference's matmul speed."""
    monkeypatch.setattr(progress, "expected_seconds_here", lambda seconds: 3 * seconds)


def test_the_line_names_the_work_and_its_time_on_the_ci_machine_and_here(capsys, machine_three_times_slower):
    with announce("Training the model", expected_seconds=42):
        pass
    assert capsys.readouterr().out == "Training the model: about 40 s on the 2-core CI machine, about 2 min here.\n"


def test_nbval_compares_the_line_without_this_machines_time():
    # nbval_sanitize.cfg's rule for the time here: two machines' lines read the same once sanitized.
    config = configparser.ConfigParser()
    config.read(REPOSITORY / "nbval_sanitize.cfg")
    rule = config["the expected time on this machine"]
    lines = [f"Training: about 2 min on the 2-core CI machine, {here} here." for here in ("about 5 s", "about 40 min")]
    assert len({re.sub(rule["regex"], rule["replace"], line) for line in lines}) == 1


def test_nested_lines_show_only_the_outermost(capsys, machine_three_times_slower):
    with announce("A sweep of 3 runs", expected_seconds=30):
        for _ in range(3):
            with announce("one run", expected_seconds=10):
                report("update 1 of 10")
    assert capsys.readouterr().out == "A sweep of 3 runs: about 30 s on the 2-core CI machine, about 2 min here.\n"


def test_report_outside_a_line_does_nothing(capsys):
    report("update 1 of 10")
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("bad", [("", None), ("x", -1.0), ("x", float("nan"))])
def test_bad_arguments_are_named(bad):
    with pytest.raises(ValueError, match="what|expected_seconds"):
        with announce(*bad):
            pass


class FakeHandle:
    def __init__(self, shown: list[str]) -> None:
        self.shown = shown

    def update(self, obj) -> None:
        self.shown.append(repr(obj))


@pytest.fixture
def jupyter_display(monkeypatch):
    """Pretend to be in Jupyter: every text the line shows, first display then updates, in order."""
    shown: list[str] = []
    monkeypatch.setattr(progress, "_in_jupyter", lambda: True)
    monkeypatch.setattr(progress, "REFRESH_SECONDS", 0.0)
    import IPython.display

    def display(obj, display_id=False):
        shown.append(repr(obj))
        return FakeHandle(shown)

    monkeypatch.setattr(IPython.display, "display", display)
    return shown


def test_in_jupyter_training_refreshes_the_line_and_puts_the_first_text_back(jupyter_display, machine_three_times_slower):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 8), torch.nn.Linear(8, 5))
    batch = (torch.randint(0, 5, (4, 6)), torch.randint(0, 5, (4, 6)))
    cfg = TrainConfig(max_steps=5, warmup_steps=1, log_interval=1, eval_interval=5)
    with announce("Training a tiny model", expected_seconds=3):
        train(model, lambda: batch, language_model_loss, cfg, device="cpu", progress=False)
    first, *refreshes, last = jupyter_display
    assert first == last == "Training a tiny model: about 3 s on the 2-core CI machine, about 9 s here."
    assert any("update 5 of 5, training loss" in text for text in refreshes)


NOTEBOOK_CELL = """
from tutorial_lib.progress import announce, report
import time
with announce("Training a model", expected_seconds=80):
    for step in range(30):
        time.sleep(0.05)
        report(f"update {step + 1} of 30")
print("done")
"""


def test_a_notebook_that_reports_progress_passes_nbval(tmp_path):
    """Executed and stored as `make execute` does, then checked as `make test` does: the refreshes (one a second
    here) are neither stored nor compared, and the time here is sanitized, so the fresh run's output equals the
    stored one."""
    path = tmp_path / "progress.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(NOTEBOOK_CELL))])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    outputs = notebook.cells[0].outputs
    assert [output.output_type for output in outputs] == ["display_data", "stream"]
    assert re.fullmatch(r"Training a model: about 80 s on the 2-core CI machine, about \d+ (s|min) here\.",
                        outputs[0].data["text/plain"])
    nbformat.write(notebook, path)
    checked = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts=", "--nbval",
         "--nbval-current-env", "--nbval-sanitize-with", str(REPOSITORY / "nbval_sanitize.cfg"), str(path)],
        capture_output=True, text=True, timeout=300,
    )
    assert checked.returncode == 0, checked.stdout[-2000:]
