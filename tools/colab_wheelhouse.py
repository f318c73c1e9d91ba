"""Download the wheels that Colab's ``pip install git+…`` of the package fetches, for the offline Colab test.

tests/test_colab_install.py does what a Colab user does, without the network: in a fresh virtual environment that
has only torch (Colab ships its own), it runs a chapter's hidden install cell pointed at a ``file://`` clone of this
repository, with pip allowed to read nothing but this folder of wheels. The folder holds the dependencies that
``pyproject.toml`` declares, except torch, with their own dependencies and setuptools for the build, at the versions
``requirements.txt`` pins. ``make test`` downloads it once into ``.venv/colab-wheels`` (git-ignored), with network.

    python tools/colab_wheelhouse.py [FOLDER]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (requirements.txt installs it there)
    import tomli as tomllib

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / ".venv" / "colab-wheels"
STAMP = "downloaded.txt"


def requirements(root: Path = ROOT) -> list[str]:
    """What the install cell makes pip fetch: the package's dependencies but torch, and the build backend."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = [req for req in project["project"]["dependencies"] if Requirement(req).name != "torch"]
    return wanted + project["build-system"]["requires"]


def download(folder: Path = WHEELHOUSE, root: Path = ROOT) -> None:
    wanted = requirements(root)
    stamp = folder / STAMP
    if stamp.exists() and stamp.read_text(encoding="utf-8").split("\n") == wanted:
        return
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(folder),
         "--constraint", str(root / "requirements.txt"), *wanted],
        check=True,
    )
    stamp.write_text("\n".join(wanted), encoding="utf-8")
    print(f"colab_wheelhouse: {len(list(folder.glob('*.whl')))} wheels in {folder}")


if __name__ == "__main__":
    download(Path(sys.argv[1]) if len(sys.argv) > 1 else WHEELHOUSE)
