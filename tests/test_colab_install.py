"""Colab, tested offline: a chapter's hidden install cell, run as written in a fresh environment that has only torch.

What a Colab user gets: a Python with its own torch, where the notebook's first cell finds no ``tutorial_lib`` and
runs ``pip install git+<the repository of _config.yml>``. Here the environment is a new virtual environment whose only
package is this machine's pinned torch (with the packages torch itself requires); the cell runs exactly as the
chapter stores it, except that the repository's address becomes a ``file://`` clone; pip may read nothing but
``.venv/colab-wheels`` (``tools/colab_wheelhouse.py``, downloaded by ``make test``) and no proxy lets it out. Then the
chapter's own import cell runs, and one exercise check on the package's function passes. Torch must still be the
one the environment started with: pip must not replace it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # tools/ holds scripts, not a package
import colab_wheelhouse  # noqa: E402
import notebook_header  # noqa: E402

CHAPTER = ROOT / "chapters" / "03_scaled_dot_product_attention.ipynb"
# One exercise check, on an answer written out (one that calls the package's function is refused: the checks trace
# what an answer calls).
CHECK = (
    "import torch\n"
    "from tutorial_lib.checks import check\n"
    "def answer(q, k, v, mask=None):\n"
    "    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
    "    if mask is not None:\n"
    "        scores = scores.masked_fill(~mask, float('-inf'))\n"
    "    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n"
    "    return weights @ v, weights\n"
    'assert check("03.attention", answer).passed'
)
TORCH = "import json, torch; print(json.dumps([torch.__version__, torch.__file__]))"


def _closure(name: str) -> list[importlib.metadata.Distribution]:
    """``name``'s distribution and every distribution it requires (markers evaluated here), each once."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [name]
    while todo:
        wanted = todo.pop()
        dist = importlib.metadata.distribution(wanted)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for requirement in map(Requirement, dist.requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


def preinstalled_torch(folder: Path) -> None:
    """Put this machine's torch, and what it requires, in ``folder``: links to the installed files, as Colab ships
    torch already installed (nothing else of this project's environment is visible)."""
    folder.mkdir()
    for dist in _closure("torch"):
        top_level = {Path(file).parts[0] for file in dist.files or [] if not str(file).startswith("..")} - {"__pycache__"}
        for entry in top_level:
            source = Path(dist.locate_file(entry))
            if source.exists() and not (folder / entry).exists():
                (folder / entry).symlink_to(source)


def test_the_install_cell_installs_the_package_offline_and_keeps_torch(tmp_path):
    wheels = colab_wheelhouse.WHEELHOUSE
    if not (wheels / colab_wheelhouse.STAMP).exists():
        pytest.fail(f"no wheels for the offline install in {wheels}: run `python tools/colab_wheelhouse.py` (make test does)")
    notebook = nbformat.read(CHAPTER, as_version=4)
    setup, imports = notebook.cells[1].source, next(c.source for c in notebook.cells[2:] if c.cell_type == "code")
    url, _ = notebook_header.repository()
    assert setup.startswith(notebook_header.SETUP_FIRST_LINE) and f'"git+{url}"' in setup
    setup = setup.replace(f'"git+{url}"', f'"git+file://{ROOT}"')  # the only change: where the repository is

    # A fresh environment with torch preinstalled, as on Colab.
    environment = tmp_path / "colab"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    preinstalled_torch(tmp_path / "torch")
    (site / "colab_torch.pth").write_text(f"{tmp_path / 'torch'}\n")

    script = tmp_path / "notebook.py"
    script.write_text(
        f"{setup}\n{imports}\n{CHECK}\n"
        "import json, torch, tutorial_lib\n"
        "print(json.dumps({'torch': [torch.__version__, torch.__file__], 'package': tutorial_lib.__file__}))\n",
        encoding="utf-8",
    )
    offline = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),  # no user configuration or cache of this machine
        "PIP_CONFIG_FILE": os.devnull,  # no index or mirror this machine's pip knows
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",  # any request fails
        "MPLBACKEND": "agg",
        "TUTORIAL_LIB_DEVICE": "cpu",
    }
    before = json.loads(subprocess.run([python, "-c", TORCH], capture_output=True, text=True, env=offline, check=True).stdout)
    run = subprocess.run([python, script], capture_output=True, text=True, env=offline, cwd=tmp_path, timeout=900)
    assert run.returncode == 0, f"the install cell, the imports or the check failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["torch"] == before, "pip replaced the preinstalled torch"
    pinned = next(line.split("==")[1].strip() for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch=="))
    assert before[0].split("+")[0] == pinned, f"the environment's torch {before[0]} is not requirements.txt's {pinned}"
    assert report["package"].startswith(str(site)), "tutorial_lib was not installed into the fresh environment"
    installed = subprocess.run([python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True,
                               env=offline, check=True).stdout
    names = [package["name"].lower() for package in json.loads(installed)]
    assert names.count("torch") == 1 and {"tutorial-lib", "tutorial_lib"} & set(names)
    assert not (site / "torch").exists(), "a second torch was installed into the environment"


def test_every_notebook_installs_the_same_way():
    """The install cell the test runs for chapter 03 is the one of every notebook (tools/notebook_header.py)."""
    cells = {
        nbformat.read(path, as_version=4).cells[1].source
        for folder in ("chapters", "solutions", "exercises")
        for path in sorted((ROOT / folder).glob("*.ipynb"))
    }
    assert len(cells) == 1 and re.search(r'pip", "install", "-q", "git\+https://github\.com/', cells.pop())


def test_the_torch_closure_is_torch_and_what_it_requires():
    names = {dist.metadata["Name"].lower() for dist in _closure("torch")}
    assert "torch" in names and not names & {"numpy", "einops", "jaxtyping", "matplotlib", "tutorial-lib"}
