"""Write or check the two header cells of every notebook, derived from ``_config.yml``'s repository.

Cell 1 (markdown): the notebook's title and a Colab badge to the notebook itself; a chapter that has exercises
(``solutions/<same file>`` exists) gets a second badge to ``exercises/<same file>``. A chapter's title is
``# NN · Title``, as the author wrote it. Its solutions and exercises are titled after it, ``# Solutions · NN Title``
and ``# Exercises · NN Title``, so that in the book (search results, browser tabs, Next/Previous links) no two pages
share a name; ``--write`` turns a ``# NN · Title`` first line of those notebooks into that form. Cell 2 (code, tag ``remove-cell``, hidden in the book): install ``tutorial_lib`` from the
repository when it is missing (Colab), then seed everything.

    python tools/notebook_header.py --check            # every notebook of chapters/, solutions/, exercises/
    python tools/notebook_header.py --write chapters/03_scaled_dot_product_attention.ipynb

Other tools (the exercise generator) call :func:`apply_header` on the notebooks they write.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = ("chapters", "solutions", "exercises")
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
EXERCISES_BADGE = "https://img.shields.io/badge/Exercises-Open%20in%20Colab-F9AB00?logo=googlecolab&logoColor=white"
TITLE = re.compile(r"# (?P<number>\d\d) · (?P<title>\S.*)")
# The title of a chapter's solutions and exercises pages, after the chapter's: "# Solutions · 03 Scaled dot-product attention".
COMPANION_TITLE = re.compile(r"# (?P<kind>Solutions|Exercises) · (?P<number>\d\d) (?P<title>\S.*)")
COMPANION = {"solutions": "Solutions", "exercises": "Exercises"}
SETUP_FIRST_LINE = "# Setup: on Colab, install tutorial_lib from the repository (Colab's own torch is kept); seed everything."


def repository(config: Path = ROOT / "_config.yml") -> tuple[str, str]:
    """``(url, branch)`` of the repository, the one place they are set."""
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))["repository"]
    url, branch = settings["url"].rstrip("/"), settings["branch"]
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"repository.url in {config} must be https://github.com/OWNER/NAME, got {url!r}")
    return url, branch


def colab_url(relative_path: str, config: Path = ROOT / "_config.yml") -> str:
    """Colab's address for a notebook of the repository, e.g. ``chapters/03_….ipynb``."""
    url, branch = repository(config)
    return f"https://colab.research.google.com/github/{url.removeprefix('https://github.com/')}/blob/{branch}/{relative_path}"


def _parse_title(line: str) -> tuple[str, str] | None:
    """``(number, title)`` of a title line in either form, ``# NN · Title`` or ``# Solutions · NN Title``."""
    match = TITLE.fullmatch(line) or COMPANION_TITLE.fullmatch(line)
    return (match["number"], match["title"]) if match else None


def _first_line(notebook: nbformat.NotebookNode) -> str:
    first = notebook.cells[0] if notebook.cells else None
    return first.source.split("\n", 1)[0] if first is not None and first.cell_type == "markdown" else ""


def _folder(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).parts[0]
    except ValueError:
        return path.parent.name


def title_of(notebook: nbformat.NotebookNode, path: Path, root: Path = ROOT) -> str:
    """The notebook's title line, checked against the file's number: a chapter's as the author wrote it; for its
    solutions and exercises, the chapter's title (when the chapter exists) in their form, ``# Solutions · NN Title``."""
    line = _first_line(notebook)
    parsed = _parse_title(line)
    folder = _folder(path, root)
    if parsed is None or parsed[0] != path.name[:2] or (folder == "chapters" and TITLE.fullmatch(line) is None):
        form = f"'# {path.name[:2]} · Title'" + (f" (or '# {COMPANION[folder]} · {path.name[:2]} Title')" if folder in COMPANION else "")
        raise ValueError(f"{path}: the first cell must be markdown starting with {form}, got {line!r}")
    chapter = root / "chapters" / path.name
    if folder in COMPANION and chapter.exists():
        chapter_title = _parse_title(_first_line(nbformat.read(chapter, as_version=4)))
        if chapter_title is not None:
            parsed = chapter_title
    return _titled_for(folder, *parsed)


def _titled_for(folder: str, number: str, title: str) -> str:
    """The title line of a notebook of ``folder`` about chapter ``number``, ``title``."""
    return f"# {COMPANION[folder]} · {number} {title}" if folder in COMPANION else f"# {number} · {title}"


def header_sources(path: Path, title: str, root: Path = ROOT) -> tuple[str, str]:
    """The sources of header cells 1 and 2 for the notebook at ``path`` (inside ``root``)."""
    relative = path.resolve().relative_to(root.resolve())
    folder = relative.parts[0]
    if folder not in NOTEBOOK_DIRS or len(relative.parts) != 2:
        raise ValueError(f"path must be a notebook directly inside one of {NOTEBOOK_DIRS}, got {relative}")
    parsed = _parse_title(title)
    if parsed is None:
        raise ValueError(f"{relative}: malformed title {title!r}: expected '# NN · Title'")
    title = _titled_for(folder, *parsed)
    config = root / "_config.yml"
    badges = [f"[![Open In Colab]({COLAB_BADGE})]({colab_url(relative.as_posix(), config)})"]
    if folder == "chapters" and (root / "solutions" / relative.name).exists():
        badges.append(f"[![Exercises: Open In Colab]({EXERCISES_BADGE})]({colab_url(f'exercises/{relative.name}', config)})")
    url, _ = repository(config)
    setup = "\n".join(
        [
            SETUP_FIRST_LINE,
            "import importlib.util, subprocess, sys",
            'if importlib.util.find_spec("tutorial_lib") is None:',
            f'    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+{url}"], check=True)',
            "from tutorial_lib.environment import setup_notebook",
            "generator = setup_notebook(seed=0)",
        ]
    )
    return "\n".join([title, "", *badges]), setup


def _has_header(notebook: nbformat.NotebookNode) -> bool:
    cells = notebook.cells
    return (
        len(cells) >= 2
        and cells[0].cell_type == "markdown"
        and _parse_title(cells[0].source.split("\n", 1)[0]) is not None
        and cells[1].cell_type == "code"
        and cells[1].source.startswith(SETUP_FIRST_LINE)
    )


def problems(path: Path, root: Path = ROOT) -> list[str]:
    """What differs between the notebook's header and the one ``_config.yml`` gives (empty when in sync)."""
    notebook = nbformat.read(path, as_version=4)
    try:
        title = title_of(notebook, path, root)
    except ValueError as error:
        return [str(error)]
    if not _has_header(notebook):
        return [f"{path}: no setup cell after the title (run tools/notebook_header.py --write {path})"]
    title_source, setup_source = header_sources(path, title, root)
    found = []
    fix = f"(run tools/notebook_header.py --write {path})"
    if notebook.cells[0].source != title_source:
        found.append(f"{path}: header cell 1 (title and badges) differs {fix}\n--- expected\n{title_source}\n--- found\n{notebook.cells[0].source}")
    if notebook.cells[1].source != setup_source:
        found.append(f"{path}: header cell 2 (setup) differs {fix}\n--- expected\n{setup_source}\n--- found\n{notebook.cells[1].source}")
    if notebook.cells[1].metadata.get("tags") != ["remove-cell"]:
        found.append(f"{path}: header cell 2 must carry exactly the tag 'remove-cell' (hidden in the book)")
    return found


def apply_header(notebook: nbformat.NotebookNode, path: Path, root: Path = ROOT) -> nbformat.NotebookNode:
    """Rewrite (or insert) the two header cells in place, keeping the title and the cells' ids; returns ``notebook``."""
    title = title_of(notebook, path, root)
    title_source, setup_source = header_sources(path, title, root)
    if not _has_header(notebook):
        notebook.cells.insert(1, nbformat.v4.new_code_cell(setup_source))
    notebook.cells[0].source = title_source
    setup = notebook.cells[1]
    if setup.source != setup_source:
        # The stored outputs belonged to other code: the notebook must be executed again (make execute).
        setup.source, setup.outputs, setup.execution_count = setup_source, [], None
    setup.metadata["tags"] = ["remove-cell"]
    return notebook


def notebooks(paths: list[str], root: Path = ROOT) -> list[Path]:
    """The given notebooks, or every notebook of the three folders."""
    if paths:
        return [Path(p).resolve() for p in paths]
    return sorted(p for folder in NOTEBOOK_DIRS for p in (root / folder).glob("*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when a header differs from _config.yml's")
    mode.add_argument("--write", action="store_true", help="rewrite the headers in place")
    parser.add_argument("paths", nargs="*", help="notebooks (default: chapters/, solutions/, exercises/)")
    args = parser.parse_args(argv)
    failed = False
    for path in notebooks(args.paths):
        if args.check:
            for problem in problems(path):
                print(problem, file=sys.stderr)
                failed = True
        else:
            notebook = nbformat.read(path, as_version=4)
            before = nbformat.writes(notebook)
            after = nbformat.writes(apply_header(notebook, path))
            if after != before:
                nbformat.write(notebook, path)  # as tools/execute_notebooks.py writes it (a final newline)
                print(f"rewrote the header of {path.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
