"""Each scenario package (`varlen.datasets.<scenario>`) exports what users call, and only that.

A package's `__all__` is a curated list: the Dataset, the Collator, the readers of the real
formats and the presets a user passes, the synthetic generator, the split policy... Helpers stay
in the submodule that defines them. The list is written out here so that a new helper is not
re-exported by accident: widening the public API is a decision, made in both places.

Imports are checked statically (`ast`), every import at any depth: inside `varlen/` a module
imports from the submodule that defines a name, never through a scenario package's `__init__`
(the import graph of tests/test_layers.py then sees the real dependency); in tests, scripts and
examples a name imported through a package must be one it exports.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

from varlen._extras import MissingExtraError

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "src" / "varlen" / "datasets"

PUBLIC = {
    "text": [
        "TextCollator",
        "TextColumns",
        "TextTable",
        "TokenizedTexts",
        "encode_rows",
        "load_tokenizer",
        "read_hub",
        "read_table",
        "split_by_column",
        "synthetic_tables",
        "tokenize_table",
    ],
    "bearing": [
        "CWRU_CLASSES",
        "PADERBORN_CLASSES",
        "BearingCollator",
        "BearingSource",
        "BearingWindows",
        "Recording",
        "WindowAugment",
        "WindowSplit",
        "download_cwru",
        "read_cwru",
        "read_paderborn",
        "read_signal_file",
        "simulate_recordings",
    ],
    "sequence": [
        "FieldSpec",
        "SequenceBatch",
        "SequenceCollator",
        "SequenceColumns",
        "SequenceDataset",
        "Source",
        "cached_columns",
        "field_specs",
        "mapping_table",
        "source_of",
        "synthetic_sequences",
        "table_columns",
        "write_arrays",
    ],
    "molecules": [
        "ATOM_VOCAB",
        "BOND_VOCAB",
        "MOLECULENET",
        "MoleculeCollator",
        "MoleculeGraphs",
        "MoleculeTable",
        "cached_graphs",
        "featurize_all",
        "moleculenet_file",
        "packaged_esol",
        "read_table",
        "usable_positions",
    ],
    "video_text": [
        "CaptionTable",
        "FeatureStore",
        "VideoTextCollator",
        "VideoTextDataset",
        "budget_sizes",
        "caption_tokens",
        "open_features",
        "read_jsonl",
        "read_msrvtt",
        "read_msrvtt_protocol",
        "read_youcook2",
        "synthetic_corpus",
        "tokenizer",
    ],
    "hyperspectral": [
        "SCENES",
        "HyperspectralCollator",
        "HyperspectralPixels",
        "PixelSplit",
        "Scene",
        "SceneSource",
        "band_statistics",
        "open_cube",
        "open_scene",
        "prepare_scene",
        "read_labels",
        "synthetic_scene",
    ],
}
SCENARIOS = sorted(PUBLIC)


def declared_all(scenario: str) -> list[str]:
    """The `__all__` a scenario's `__init__.py` declares, read from the source (no import, no extra)."""
    tree = ast.parse((DATASETS / scenario / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"varlen/datasets/{scenario}/__init__.py declares no __all__")


def submodules(scenario: str) -> set[str]:
    return {path.stem for path in (DATASETS / scenario).glob("*.py") if path.stem != "__init__"}


def import_scenario(scenario: str) -> types.ModuleType:
    try:
        return importlib.import_module(f"varlen.datasets.{scenario}")
    except MissingExtraError as error:
        pytest.skip(str(error))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_exports_exactly_its_curated_names(scenario: str) -> None:
    declared = declared_all(scenario)
    assert len(declared) == len(set(declared)), f"{scenario}: a name is listed twice in __all__"
    added, removed = sorted(set(declared) - set(PUBLIC[scenario])), sorted(set(PUBLIC[scenario]) - set(declared))
    assert not added and not removed, f"varlen.datasets.{scenario}.__all__: added {added}, removed {removed}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_exported_name_resolves_and_nothing_else_is_public(scenario: str) -> None:
    package = import_scenario(scenario)
    missing = [name for name in package.__all__ if not hasattr(package, name)]
    assert not missing, f"varlen.datasets.{scenario} lists names it does not define: {missing}"
    for name in package.__all__:  # the package re-exports the submodule's object, not a copy
        value = getattr(package, name)
        defined_in = getattr(value, "__module__", None)
        if isinstance(value, type | types.FunctionType):
            assert defined_in.startswith(f"varlen.datasets.{scenario}."), f"{scenario}.{name} comes from {defined_in}"
    unlisted = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "require"
    } - set(package.__all__)
    assert not unlisted, f"varlen.datasets.{scenario} has public names outside __all__: {sorted(unlisted)}"


# -- imports through a package, found statically ---------------------------------------------------


def _scenario(module: str) -> str | None:
    prefix, _, scenario = module.rpartition(".")
    return scenario if prefix == "varlen.datasets" and scenario in PUBLIC else None


def through_packages(path: Path, root: Path = ROOT) -> list[tuple[int, str, str]]:
    """`(line, scenario, name)` of every name `path` takes from a scenario package's `__init__`.

    Counted: `from varlen.datasets.<s> import name` (relative forms too) and `alias.name` where
    `alias` is bound to the package (`import varlen.datasets.<s> as alias`,
    `from varlen.datasets import <s>`), or the dotted `varlen.datasets.<s>.name`. Submodules are
    not names of the package's `__init__` and are never reported.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(root)
    package = ".".join(rel.parts[:-1]) if path.name == "__init__.py" else ".".join(rel.with_suffix("").parts[:-1])
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if scenario := _scenario(base):
                found += [(node.lineno, scenario, alias.name) for alias in node.names]
            for alias in node.names:
                if scenario := _scenario(f"{base}.{alias.name}"):
                    aliases[alias.asname or alias.name] = scenario
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and (scenario := _scenario(alias.name)):
                    aliases[alias.asname] = scenario
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = ast.unparse(node.value)
        scenario = aliases.get(owner) if isinstance(node.value, ast.Name) else _scenario(owner)
        if scenario:
            found.append((node.lineno, scenario, node.attr))
    return [(line, s, name) for line, s, name in found if name not in submodules(s)]


def _python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def test_varlen_imports_scenario_names_from_the_submodules_that_define_them() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {name} through varlen.datasets.{scenario}"
        for path in _python_files("src/varlen")
        for line, scenario, name in through_packages(path, ROOT / "src")
    ]
    assert not offending, "import these from their submodule:\n" + "\n".join(offending)


def test_tests_scripts_and_examples_take_only_exported_names_from_a_package() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {name} is not exported by varlen.datasets.{scenario}"
        for path in _python_files("tests", "scripts", "examples")
        for line, scenario, name in through_packages(path)
        if name not in PUBLIC[scenario]
    ]
    assert not offending, "import these from their submodule:\n" + "\n".join(offending)


def test_the_import_check_sees_every_way_through_a_package(tmp_path: Path) -> None:
    folder = tmp_path / "varlen" / "datasets" / "bearing"
    folder.mkdir(parents=True)
    (folder / "extra.py").write_text(
        "import varlen.datasets.hyperspectral as hs\n"
        "import varlen.datasets.molecules\n"
        "from varlen.datasets import text as text_data\n"
        "from varlen.datasets.bearing import cut_windows, windows\n"
        "from . import WindowTable\n"
        "from .storage import gather_windows\n"
        "def later():\n"
        "    from varlen.datasets.video_text import span_overlap\n"
        "    return hs.read_array, text_data.OVERFLOW, varlen.datasets.molecules.features, hs.readers\n"
        "x = varlen.datasets.molecules.CACHE_FORMAT\n"
    )
    found = through_packages(folder / "extra.py", root=tmp_path)
    assert sorted(found) == [
        (4, "bearing", "cut_windows"),
        (5, "bearing", "WindowTable"),
        (8, "video_text", "span_overlap"),
        (9, "hyperspectral", "read_array"),
        (9, "text", "OVERFLOW"),
        (10, "molecules", "CACHE_FORMAT"),
    ]


def test_a_clone_beside_the_users_scripts_does_not_shadow_the_installed_package(tmp_path: Path) -> None:
    """A clone named `varlen` in the working folder is a folder without `__init__.py`: with the package
    under `src/` it is not found as a namespace package in place of the installed one."""
    (tmp_path / "varlen" / "tests").mkdir(parents=True)
    code = "import varlen; print(varlen.__file__, varlen.write_arrays.__name__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(ROOT / "src" / "varlen" / "__init__.py"), "write_arrays"]


def test_a_moved_module_imports_under_its_old_name_with_a_warning() -> None:
    import varlen.storage.cache

    sys.modules.pop("varlen.cache", None)
    with pytest.warns(DeprecationWarning, match="varlen.cache moved to varlen.storage.cache"):
        old = importlib.import_module("varlen.cache")
    assert old is varlen.storage.cache and varlen.storage.cache.__spec__.name == "varlen.storage.cache"


def test_nothing_of_the_project_imports_a_moved_module_by_its_old_name() -> None:
    from varlen._moved import MOVED

    offending = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
        for path in _python_files("src/varlen", "tests", "scripts", "examples")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in ([node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])
        if name in MOVED
    ]
    assert not offending, "import the new names:\n" + "\n".join(offending)
