"""The layers of ARCHITECTURE.md, checked on the source: no module of varlen reaches itself through
imports, and what reads data (`varlen.datasets`) depends on no model, DataModule or command.

The import graph is built statically (`ast` over every module of the package), so a cycle is found
whether or not the import happens to run. Its edges:

- `import a.b.c` and `from a.b.c import name` import module `a.b.c`;
- `from a.b import c` imports package `a.b` (its `__init__`) and also module `a.b.c` when
  `c` is a submodule: a submodule imported through its package runs the package's `__init__`;
- relative imports are resolved against the importing module;
- imports inside functions count: a function-level import that closes a cycle only delays it, the
  two modules still cannot be understood (or moved) one without the other. Imports under
  `if TYPE_CHECKING:` do not count: they never run.

A module's parent packages are not counted as imported by it: a package `__init__` that re-exports
its submodules would otherwise form a cycle with each of them.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "varlen"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of varlen by dotted name (a package by its `__init__.py`)."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, at any depth, except under `if TYPE_CHECKING:`."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        children = node.orelse if _type_checking_only(node) else ast.iter_child_nodes(node)
        stack.extend(children)
    return found


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (at `path`) imports (see the module docstring)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        targets.add(base)
        targets.update(f"{base}.{alias.name}" for alias in node.names)
    return (targets & known) - {name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the varlen modules it imports."""
    found = modules()
    known = set(found)
    return {name: imported_modules(name, path, known) for name, path in found.items()}


def test_the_import_graph_sees_what_python_imports() -> None:
    """The graph itself: edges of every kind above, on modules whose imports are known."""
    graph = import_graph()
    assert len(graph) > 80 and "varlen.batching.plan" in graph and "varlen.datasets.molecules" in graph
    # from varlen.batching.padding import round_up
    assert "varlen.batching.padding" in graph["varlen.batching.plan"]
    # the package's __init__ imports its submodules
    package = graph["varlen.datasets.molecules"]
    assert {"varlen.datasets.molecules.graphs", "varlen.datasets.molecules.readers"} <= package
    # import varlen.datamodules
    assert "varlen.datamodules" in graph["varlen.cli.dispatch"]
    # a parent package is not an import of its submodule
    assert "varlen.datasets.molecules" not in graph["varlen.datasets.molecules.rows"]


def test_a_submodule_imported_through_its_package_counts_the_package(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from varlen.datasets import molecules\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n    from varlen import cli\n"
        "def later():\n    import varlen.prepare.report\n"
    )
    known = {
        "varlen.datasets",
        "varlen.datasets.molecules",
        "pkg.sibling",
        "varlen.cli.dispatch",
        "varlen.prepare.report",
    }
    got = imported_modules("pkg.mod", tmp_path / "mod.py", known)
    assert got == {"varlen.datasets", "varlen.datasets.molecules", "pkg.sibling", "varlen.prepare.report"}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of `graph`, each as `[a, b, ..., a]` where each module imports the next; one edge of each
    cycle found is set aside before looking again, so every cycle is reported, not only the first."""
    graph = {name: set(targets) for name, targets in graph.items()}
    found = []
    while True:
        try:  # graphlib reads the graph as node -> predecessors; its cycle runs against the imports
            graphlib.TopologicalSorter(graph).prepare()
            return found
        except graphlib.CycleError as error:
            cycle = error.args[1][::-1]
            found.append(cycle)
            graph[cycle[0]].discard(cycle[1])


def test_import_cycles_are_found_and_named_in_import_order() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}, "f": {"a"}}
    cycles = import_cycles(graph)
    assert len(cycles) == 2 and {frozenset(c) for c in cycles} == {frozenset("abc"), frozenset("de")}
    for cycle in cycles:  # each module imports the next, back to the first
        assert cycle[0] == cycle[-1] and all(cycle[k + 1] in graph[cycle[k]] for k in range(len(cycle) - 1))
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_reaches_itself_through_imports() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("layer", ["varlen.models", "varlen.datamodules", "varlen.cli.dispatch"])
def test_what_reads_data_imports_no_model_datamodule_or_command(layer: str) -> None:
    offending = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if name.startswith("varlen.datasets")
        for target in targets
        if target == layer or target.startswith(layer + ".")
    )
    assert not offending, "\n".join(offending)


#: varlen's packages from the lowest: each imports only those before it (ARCHITECTURE.md's layers)
LAYERS = [
    "prepare",
    "batching",
    "storage",
    "stream",
    "datasets",
    "datamodules",
    "models",
    "callbacks",
    "tune",
    "cli",
    "testing",
]


def test_each_package_imports_only_the_layers_below_it() -> None:
    def layer(module: str) -> int | None:
        top = module.split(".")[1] if module.count(".") else None
        return LAYERS.index(top) if top in LAYERS else None

    offending = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        for target in targets
        if layer(name) is not None and layer(target) is not None and layer(target) > layer(name)
    )
    assert not offending, "\n".join(offending)


def test_no_module_passes_450_lines_and_no_function_60() -> None:
    """ARCHITECTURE.md's sizes: a module past them is split by job, not squeezed."""
    long_modules, long_functions = [], []
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 450:
            long_modules.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                long_functions.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long_modules and not long_functions, "\n".join(long_modules + long_functions)
