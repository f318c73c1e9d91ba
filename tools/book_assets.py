"""Install the JavaScript the rendered book serves itself, so that it works offline (``make book`` runs this).

The book needs three browser packages that Jupyter Book 1 would otherwise load from CDNs on every page view:

- MathJax 3 typesets the equations (MathJax 4 would fetch its fonts from a CDN);
- RequireJS and ``@jupyter-widgets/html-manager`` draw the stored widget outputs.

A fourth, ``axe-core``, is the browser suite's accessibility check: the suite injects it into each page it audits
from ``.book-assets/`` (the book does not serve it).

They come from the npm registry at the versions pinned below (``npm pack``: the package's tarball alone, without its
build-time dependencies), each checked against its pinned sha512, and are unpacked into ``.book-assets/`` (ignored by
git). ``tools/book_extension.py`` copies them into ``_build/html/_vendor/`` and points every page at them. Nothing is
committed and nothing goes under ``_static/`` (Jupyter Book 1 would add every ``_static/*.js`` to every page).

    python tools/book_assets.py           # install what is missing or outdated (quiet when up to date)
    python tools/book_assets.py --check   # exit 1 when .book-assets/ is not what the pins say
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / ".book-assets"
STAMP = ASSETS / "installed.json"


@dataclass(frozen=True)
class Package:
    """One npm package: its exact version, the sha512 of its tarball, and the paths of it the book serves."""

    name: str
    version: str
    integrity: str  # npm's "sha512-<base64>" of the tarball
    folder: str  # under .book-assets/ and _build/html/_vendor/: the package's name, as npm's CDNs lay them out
    keep: tuple[str, ...]  # paths inside the tarball's package/ folder: files, or folders copied whole


PACKAGES = (
    Package(
        "mathjax",
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        "mathjax",
        # es5/ holds the combined components and what they load on demand (fonts, TeX extensions, menu, a11y).
        ("es5", "LICENSE"),
    ),
    Package(
        "requirejs",
        "2.3.7",
        "sha512-DouTG8T1WanGok6Qjg2SXuCMzszOo0eHeH9hDZ5Y4x8Je+9JB38HdTLT4/VA8OaUhBa0JPVHJ0pyBkM1z+pDsw==",
        "requirejs",
        ("require.js",),  # MIT, as its header says
    ),
    Package(
        "@jupyter-widgets/html-manager",
        "1.0.15",  # the ipywidgets 8 line (controls 2.0.0 models, as ipywidgets==8.1.9 stores them)
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
        "@jupyter-widgets/html-manager",
        ("dist", "package.json"),  # its licence (BSD-3-Clause) is stated in package.json
    ),
    Package(
        "axe-core",
        "4.10.3",  # the accessibility engine of the browser suite (tests/test_book_browser.py), not of the book
        "sha512-Xm7bpRXnDSX2YE2YFfBk2FnF0ep6tmG7xPh8iHee8MIcrgq762Nkce856dYtJYLkuIoYZvGfTs/PbZhideTcEg==",
        "axe-core",
        ("axe.min.js", "LICENSE"),  # MPL-2.0
    ),
)

# What the pages load, relative to _build/html/ (the extension swaps the CDN addresses for these).
MATHJAX = "_vendor/mathjax/es5/tex-chtml.js"
REQUIREJS = "_vendor/requirejs/require.js"
WIDGETS = "_vendor/@jupyter-widgets/html-manager/dist/embed-amd.js"
# The widget manager fetches its icon fonts (and any widget module it does not bundle) from <this folder>/<package>/.
WIDGETS_CDN = "_vendor/"
# What the browser suite injects into each page it audits (from .book-assets/, never from the network); the book
# itself does not serve it (tools/book_extension.py leaves TEST_ONLY out of _build/html/_vendor/).
AXE = ASSETS / "axe-core" / "axe.min.js"
TEST_ONLY = ("axe-core",)


def manifest() -> dict[str, str]:
    """What an up-to-date ``.book-assets/`` records: each package's version and tarball hash."""
    return {package.name: f"{package.version} {package.integrity} -> {package.folder}: {', '.join(package.keep)}" for package in PACKAGES}


def up_to_date(assets: Path = ASSETS) -> bool:
    stamp = assets / STAMP.name
    return stamp.exists() and json.loads(stamp.read_text()) == manifest()


def _sha512(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def _pack(package: Package, into: Path) -> Path:
    """Download the package's tarball with npm (from its cache when there) and check it against the pin."""
    spec = f"{package.name}@{package.version}"
    try:
        result = subprocess.run(
            ["npm", "pack", "--json", "--pack-destination", str(into), spec],
            capture_output=True, text=True, check=True, cwd=into,
        )
    except FileNotFoundError:
        raise SystemExit("book_assets: npm is not installed (the book's JavaScript comes from the npm registry)") from None
    except subprocess.CalledProcessError as error:
        raise SystemExit(f"book_assets: `npm pack {spec}` failed:\n{error.stderr}") from None
    tarball = into / json.loads(result.stdout)[0]["filename"]
    if (found := _sha512(tarball)) != package.integrity:
        raise SystemExit(f"book_assets: {spec} has sha512 {found}, the pin says {package.integrity}")
    return tarball


def _unpack(package: Package, tarball: Path, assets: Path) -> None:
    target = assets / package.folder
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory() as scratch, tarfile.open(tarball) as archive:
        archive.extractall(scratch, filter="data")
        source = Path(scratch) / "package"
        for kept in package.keep:
            path = source / kept
            if not path.exists():
                raise SystemExit(f"book_assets: {package.name}@{package.version} has no {kept}")
            destination = target / kept
            destination.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, destination, ignore=shutil.ignore_patterns("*.map"))
            else:
                shutil.copy2(path, destination)


def install(assets: Path = ASSETS) -> bool:
    """Bring ``assets`` up to the pins; returns whether anything was installed."""
    if up_to_date(assets):
        return False
    assets.mkdir(parents=True, exist_ok=True)
    (assets / STAMP.name).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as download:
        for package in PACKAGES:
            _unpack(package, _pack(package, Path(download)), assets)
            print(f"book_assets: {package.name}@{package.version} -> {assets / package.folder}")
    for served in (MATHJAX, REQUIREJS, WIDGETS, f"_vendor/{AXE.relative_to(ASSETS).as_posix()}"):
        if not (assets / served.removeprefix("_vendor/")).is_file():
            raise SystemExit(f"book_assets: {served} is missing after the install")
    (assets / STAMP.name).write_text(json.dumps(manifest(), indent=1) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether .book-assets/ matches the pins")
    args = parser.parse_args(argv)
    if args.check:
        ok = up_to_date()
        print("book_assets: up to date" if ok else "book_assets: missing or outdated (run python tools/book_assets.py)")
        return 0 if ok else 1
    install()
    return 0


if __name__ == "__main__":
    sys.exit(main())
