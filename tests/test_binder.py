"""Binder's environment (binder/) runs the chapters: the package's dependencies at requirements.txt's pins, torch from
the CPU-only index, no test or book tools, and tutorial_lib installed by postBuild."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (requirements.txt installs it there)
    import tomli as tomllib


def _pins(path: Path) -> dict[str, Requirement]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return {Requirement(line).name: Requirement(line) for line in lines if line and not line.startswith("-")}


def test_binder_pins_are_the_requirements_pins():
    binder, local = _pins(ROOT / "binder" / "requirements.txt"), _pins(ROOT / "requirements.txt")
    for name, requirement in binder.items():
        (spec,) = requirement.specifier
        (local_spec,) = local[name].specifier
        assert spec.operator == local_spec.operator == "=="
        # torch's CPU wheel carries a local version label: 2.13.0+cpu is requirements.txt's 2.13.0
        assert spec.version.split("+")[0] == local_spec.version, name
    assert str(binder["torch"].specifier).endswith("+cpu")


def test_binder_installs_every_runtime_dependency_and_nothing_for_tests():
    binder = _pins(ROOT / "binder" / "requirements.txt")
    runtime = {Requirement(req).name for req in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert set(binder) == runtime
    assert not set(binder) & {"pytest", "nbval", "playwright", "transformers", "jupyter-book", "beartype"}


def test_binder_uses_the_cpu_index_and_installs_the_package():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text.splitlines()
    post_build = ROOT / "binder" / "postBuild"
    assert os.access(post_build, os.X_OK)
    assert "pip install --no-deps -e ." in post_build.read_text()
