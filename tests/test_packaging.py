"""Packaging: loose bounds for Colab in pyproject.toml, exact pins in requirements.txt, every listed module imports."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import tutorial_lib

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (requirements.txt installs it there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def all_dependencies() -> list[Requirement]:
    project = PYPROJECT["project"]
    extras = [req for group in project.get("optional-dependencies", {}).values() for req in group]
    return [Requirement(req) for req in project["dependencies"] + extras]


@pytest.mark.parametrize("requirement", all_dependencies(), ids=str)
def test_pyproject_has_lower_bounds_only(requirement):
    """No ``==``, ``<``, ``~=`` or ``!=``: on Colab, ``pip install`` must keep the preinstalled torch and friends."""
    operators = {spec.operator for spec in requirement.specifier}
    assert operators <= {">="}, f"{requirement} has {operators - {'>='}}"


def test_torch_is_a_loose_dependency():
    torch_requirement = next(r for r in all_dependencies() if r.name == "torch")
    assert [spec.operator for spec in torch_requirement.specifier] == [">="]


def test_requirements_pin_torch_and_jupyter_book_1():
    path = ROOT / "requirements.txt"
    if not path.exists():
        pytest.skip("requirements.txt is not written yet")
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    requirements = {Requirement(line).name: Requirement(line) for line in lines if line}
    assert str(requirements["torch"].specifier) == "==2.13.0"
    assert set(map(str, requirements["jupyter-book"].specifier)) == {">=1.0.4", "<2"}


def test_version_matches_pyproject():
    assert tutorial_lib.__version__ == PYPROJECT["project"]["version"]


def listed_modules() -> list[str]:
    """The modules of the table in ``tutorial_lib/__init__.py``'s docstring (one per row, in double back-quotes)."""
    return re.findall(r"^``([\w.]+)``", tutorial_lib.__doc__, flags=re.MULTILINE)


def test_the_docstring_lists_the_core_modules():
    core = {"attention", "multi_head", "normalization", "models.gpt", "sampling", "training", "counting"}
    assert core <= set(listed_modules())


@pytest.mark.parametrize("module", listed_modules())
def test_every_listed_module_imports(module):
    importlib.import_module(f"tutorial_lib.{module}")
