"""The machine-speed probe behind every expected time (tutorial_lib.machine_speed, chapter 00)."""

from __future__ import annotations

import os

import pytest
import torch

from tutorial_lib import machine_speed
from tutorial_lib.machine_speed import (
    REFERENCE_GFLOPS,
    expected_seconds_here,
    kernel_isas,
    matmul_gflops,
    measured_gflops,
    speed_factor,
)


def test_the_probe_measures_a_plausible_throughput_and_leaves_the_thread_count_alone():
    threads = torch.get_num_threads()
    gflops = matmul_gflops(threads=1, seconds=0.05)
    assert 0.5 < gflops < 10_000  # from a slow laptop core to a large server's
    assert torch.get_num_threads() == threads


def test_the_probe_runs_once_per_process_and_thread_count(monkeypatch):
    calls = []
    monkeypatch.setattr(machine_speed, "_measured", {})
    monkeypatch.setattr(machine_speed, "matmul_gflops", lambda: calls.append(1) or 50.0)
    assert measured_gflops() == measured_gflops() == 50.0 and len(calls) == 1


def test_times_scale_with_the_inverse_of_the_throughput():
    assert speed_factor(REFERENCE_GFLOPS) == 1.0
    assert expected_seconds_here(60, gflops=REFERENCE_GFLOPS / 3) == pytest.approx(180)  # a third of the speed
    assert expected_seconds_here(60, gflops=REFERENCE_GFLOPS * 2) == pytest.approx(30)


@pytest.mark.parametrize(
    ("call", "name"),
    [(lambda: matmul_gflops(threads=0), "threads"), (lambda: matmul_gflops(size=True), "size"),
     (lambda: matmul_gflops(seconds=0), "seconds"), (lambda: speed_factor(0.0), "gflops"),
     (lambda: expected_seconds_here(-1), "reference_seconds")],
)
def test_bad_arguments_are_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_the_avx2_emulation_takes_effect_in_all_three_back_ends(monkeypatch):
    # What `make test CPU_ISA=avx2` sets: each back end must report AVX2, none a wider instruction set.
    monkeypatch.setitem(os.environ, "ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setitem(os.environ, "ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setitem(os.environ, "MKL_ENABLE_INSTRUCTIONS", "AVX2")
    isas = kernel_isas()
    assert isas["aten"] == "AVX2", isas
    assert "AVX2" in isas["onednn"] and "512" not in isas["onednn"], isas
    assert "AVX2" in isas["mkl"] and "512" not in isas["mkl"], isas


def test_every_chapter_has_its_stored_time():
    from pathlib import Path

    chapters = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "chapters").glob("*.ipynb"))
    assert sorted(machine_speed.CHAPTER_SECONDS) == chapters
    assert all(seconds > 0 for seconds in machine_speed.CHAPTER_SECONDS.values())
