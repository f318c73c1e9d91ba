"""Python 3.10, as pyproject.toml and the README claim: every file parses with 3.10's grammar and uses no name of the
standard library that 3.11 added; where a python3.10 is installed, every file also byte-compiles under it.

CI runs Python 3.11, so the grammar is checked with ``ast.parse(..., feature_version=(3, 10))`` (``except*`` and the
other 3.11 syntax fail there), and the standard library's 3.11 additions are looked for by name.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(path for folder in ("tutorial_lib", "tools", "tests", "benchmarks") for path in (ROOT / folder).rglob("*.py"))
OLDEST = (3, 10)
# What Python 3.11 added to the standard library that a 3.10 interpreter lacks (the ones a project like this may reach
# for); each is imported or used under a guard where the project needs it.
NEW_IN_3_11 = {
    "tomllib": r"^\s*import tomllib\b|^\s*from tomllib\b",
    "datetime.UTC": r"\bdatetime\.UTC\b|from datetime import [^\n]*\bUTC\b",
    "typing.Self": r"from typing import [^\n]*\bSelf\b|\btyping\.Self\b",
    "typing.assert_never / Never / LiteralString / reveal_type": r"from typing import [^\n]*\b(assert_never|Never|LiteralString|reveal_type|TypeVarTuple|Unpack|NotRequired|Required)\b",
    "enum.StrEnum": r"\bStrEnum\b",
    "asyncio.TaskGroup": r"\bTaskGroup\b",
    "ExceptionGroup": r"\bExceptionGroup\b|\bexcept\*",
    "hashlib.file_digest": r"\bfile_digest\b",
    "contextlib.chdir": r"\bcontextlib\.chdir\b|from contextlib import [^\n]*\bchdir\b",
}


def test_python_requires_is_the_oldest_version_checked():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'requires-python\s*=\s*">=3\.10"', text)


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_file_parses_with_the_oldest_grammar(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=OLDEST)


def test_no_file_uses_the_standard_library_of_3_11_without_a_guard():
    found = []
    for path in SOURCES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            guarded = any("sys.version_info" in earlier for earlier in lines[max(0, number - 3):number])
            for name, pattern in NEW_IN_3_11.items():
                if re.search(pattern, line) and not guarded and path.name != Path(__file__).name:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {name}: {line.strip()}")
    assert not found, "Python 3.11-only names outside a version guard:\n" + "\n".join(found)


def _python_3_10() -> str | None:
    """A python3.10 that runs: on PATH, or one pyenv installed (its shim fails when 3.10 is not the selected version)."""
    candidates = [shutil.which("python3.10"), *map(str, Path.home().glob(".pyenv/versions/3.10*/bin/python3.10"))]
    for candidate in filter(None, candidates):
        run = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                             text=True, check=False)
        if run.returncode == 0 and run.stdout.strip() == "(3, 10)":
            return candidate
    return None


PYTHON_3_10 = _python_3_10()


@pytest.mark.skipif(PYTHON_3_10 is None, reason="no python3.10 on this machine: the grammar test stands in")
def test_every_file_byte_compiles_under_python_3_10(tmp_path):
    # Compiled into one file in tmp_path, overwritten each time: nothing is written beside the sources.
    script = "import py_compile, sys\nfor path in sys.argv[2:]: py_compile.compile(path, cfile=sys.argv[1], doraise=True)"
    result = subprocess.run(
        [PYTHON_3_10, "-c", script, str(tmp_path / "compiled.pyc"), *map(str, SOURCES)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
