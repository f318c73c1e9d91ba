"""The machine-speed probe behind every expected time (tutorial_lib.machine_speed, chapter 00)."""

from __future__ import annotations

import os

import pytest
import torch

from tutorial_lib import machine_speed
from tutorial_lib.machine_speed import (
    REFERENCE_UPDATE_MS,
    expected_seconds_here,
    kernel_isas,
    matmul_gflops,
    measured_update_milliseconds,
    speed_factor,
    update_milliseconds,
)


def test_the_probes_measure_plausible_speeds_and_leave_threads_and_random_state_alone():
    threads, state = torch.get_num_threads(), torch.random.get_rng_state()
    assert 0.5 < matmul_gflops(threads=1, seconds=0.05) < 10_000  # from a slow laptop core to a large server's
    assert 0.1 < update_milliseconds(threads=1, seconds=0.05) < 1_000
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), state)


def test_the_probe_runs_once_per_process_and_thread_count(monkeypatch):
    calls = []
    monkeypatch.setattr(machine_speed, "_measured", {})
    monkeypatch.setattr(machine_speed, "update_milliseconds", lambda: calls.append(1) or 25.0)
    assert measured_update_milliseconds() == measured_update_milliseconds() == 25.0 and len(calls) == 1


def test_times_scale_with_the_time_of_an_update():
    assert speed_factor(REFERENCE_UPDATE_MS) == 1.0
    assert expected_seconds_here(60, update_ms=3 * REFERENCE_UPDATE_MS) == pytest.approx(180)  # a third of the speed
    assert expected_seconds_here(60, update_ms=REFERENCE_UPDATE_MS / 2) == pytest.approx(30)


@pytest.mark.parametrize(
    ("call", "name"),
    [(lambda: matmul_gflops(threads=0), "threads"), (lambda: matmul_gflops(size=True), "size"),
     (lambda: matmul_gflops(seconds=0), "seconds"), (lambda: update_milliseconds(seconds=-1), "seconds"),
     (lambda: speed_factor(0.0), "update_ms"), (lambda: expected_seconds_here(-1), "reference_seconds")],
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
    if "mkl" in isas or _cpu_vendor() == "GenuineIntel":  # on other CPUs MKL's verbose line names no instruction set
        assert "AVX2" in isas["mkl"] and "512" not in isas["mkl"], isas


def _cpu_vendor() -> str:
    with open("/proc/cpuinfo") as cpuinfo:
        return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("vendor_id")), "")


def test_every_chapter_has_its_stored_time():
    from pathlib import Path

    chapters = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "chapters").glob("*.ipynb"))
    assert sorted(machine_speed.CHAPTER_SECONDS) == chapters
    assert all(seconds > 0 for seconds in machine_speed.CHAPTER_SECONDS.values())
