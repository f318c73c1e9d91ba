"""The package's structure: no module of tutorial_lib imports, directly or through others, a module that imports it.

The graph is read from the source with :mod:`ast`, so every import counts, those inside functions included (a late
import hides a cycle from Python until the function runs; it does not hide it from this test).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tutorial_lib"


def module_files(package_dir: Path) -> dict[str, Path]:
    """Every module of the package at ``package_dir`` by its dotted name; a package is its ``__init__.py``."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module name ``from <base> import ...`` reads (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _nearest_module(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` if it is a module of the package, else the closest enclosing one (None outside the package)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package that its file imports, anywhere in the file.

    ``from P import x`` is an edge to the submodule ``P.x`` when there is one, else to ``P`` (its ``__init__``), where
    ``x`` is a name defined or re-exported. The parent packages that Python initialises before a submodule are no edge:
    they run to completion before the submodule's body starts, so they cannot see it half-initialised unless they
    import it themselves, and that import is an edge of theirs.
    """
    modules = module_files(package_dir)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _imported_base(node, module, is_package)
                targets += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        graph[module] = {found for target in targets if (found := _nearest_module(target, modules)) is not None}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == 1:
                return path[path.index(successor) :] + [successor]
            if successor not in state and (cycle := visit(successor)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_tutorial_lib_has_no_import_cycle():
    graph = import_graph(PACKAGE)
    assert {"tutorial_lib", "tutorial_lib.recipes", "tutorial_lib.recipes.ablation", "tutorial_lib.training"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in tutorial_lib: " + " -> ".join(cycle)


def test_the_package_root_imports_nothing_of_the_package():
    """So ``from tutorial_lib import __version__`` is safe from any module."""
    assert import_graph(PACKAGE)["tutorial_lib"] == set()


def test_the_recipes_import_each_other_directly():
    graph = import_graph(PACKAGE)
    recipes = [name for name in graph if name.startswith("tutorial_lib.recipes.")]
    assert {"tutorial_lib.recipes.cache", "tutorial_lib.recipes.char_gpt", "tutorial_lib.recipes.bert"} <= set(recipes)
    assert not [name for name in recipes if "tutorial_lib.recipes" in graph[name]]
    assert "tutorial_lib.recipes.char_gpt" in graph["tutorial_lib.recipes.ablation"]  # split_batches, at the top


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return root / "pkg"


def test_a_cycle_through_a_late_import_is_found(tmp_path):
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "def helper():\n    from pkg import a  # late, inside a function\n    return a\n",
        "pkg/c.py": "import pkg.a\n",
    })
    graph = import_graph(package)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"pkg.a", "pkg.b"}


def test_a_name_imported_from_a_package_is_an_edge_to_its_init(tmp_path):
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from pkg.sub.low import helper\nfrom pkg.sub.high import use\n",
        "pkg/sub/low.py": "def helper():\n    return 1\n",
        "pkg/sub/high.py": "from .low import helper\n\ndef use():\n    return helper()\n",
    })
    graph = import_graph(package)
    assert graph["pkg.sub"] == {"pkg.sub.low", "pkg.sub.high"} and graph["pkg.sub.high"] == {"pkg.sub.low"}
    assert find_cycle(graph) is None  # submodules that import each other directly: no cycle
    (package / "sub" / "high.py").write_text("from pkg.sub import helper\n", encoding="utf-8")  # through the package
    graph = import_graph(package)
    assert graph["pkg.sub.high"] == {"pkg.sub"}
    assert find_cycle(graph) == ["pkg.sub", "pkg.sub.high", "pkg.sub"]
