"""Old module paths (before the package layout) still import, for one release, with a warning.

`kdist.compat.moved` maps each old dotted path to the module that now lives in a package:
importing the old one warns once naming the new path and gives the very same module, so
README snippets, notebooks and saved configs (`_target_: kdist.sweep.SummaryCallback`)
keep working. No shim file is left where the old module was.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest
from hydra.utils import get_class, get_method

from kdist.compat import moved
from kdist.compat.moved import MOVED, new_name
from kdist.config.trust import trusted_target
from kdist.runs import plots, sweep

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _old_paths_finder():
    """The finder the commands, `kdist.compose` and `kdist.config.instantiate` install
    (`import kdist` alone does not); removed again when this test installed it."""
    was_installed = moved.installed()
    moved.install()
    yield
    if not was_installed:
        sys.meta_path.remove(moved._FINDER)


def _forget(monkeypatch: pytest.MonkeyPatch, old: str) -> None:
    """Import `old` afresh in this test (another test may have imported it already)."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    parent, _, last = old.rpartition(".")
    module = importlib.import_module(parent)
    if last in vars(module):  # not `hasattr`: `kdist.<old name>` would load the module
        monkeypatch.delattr(module, last)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_same_module_and_warns_once_with_the_new_one(
    monkeypatch: pytest.MonkeyPatch, old: str
):
    new = MOVED[old]
    _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}; import {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert importlib.import_module(old) is module
    assert again == []  # once per process


def test_the_public_names_of_the_issue_keep_working(monkeypatch: pytest.MonkeyPatch):
    for old in ("kdist.plots", "kdist.sweep", "kdist.compiling"):
        _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning):
        import kdist.plots

        from kdist import sweep as old_sweep
    assert kdist.plots.history_figure is plots.history_figure
    assert old_sweep.SummaryCallback is sweep.SummaryCallback
    # A saved config's `_target_`, located the way Hydra locates it.
    assert get_class("kdist.sweep.SummaryCallback") is sweep.SummaryCallback
    with pytest.warns(DeprecationWarning, match="kdist.modeling.compiling"):
        assert get_method("kdist.compiling.build_loss") is get_method(
            "kdist.modeling.compiling.build_loss"
        )


def test_trust_resolves_old_spellings_to_the_moved_building_blocks(
    monkeypatch: pytest.MonkeyPatch,
):
    for old in ("kdist.optimizers", "kdist.lazy_optimizers"):
        _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning):
        assert trusted_target("kdist.optimizers.build")
        assert trusted_target("kdist.lazy_optimizers.LazyAdam")
    assert trusted_target("kdist.modeling.optimizers.build")
    assert trusted_target("kdist.modeling.lazy_optimizers.LazyAdam")
    # Moved or not, a module reached as an attribute of another is still refused.
    assert not trusted_target("kdist.optimizers.instantiate")
    assert not trusted_target("kdist.modeling.optimizers.keras.layers.Dense")


def test_only_the_old_names_are_answered_and_no_shim_file_is_left():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("kdist.no_such_module")
    assert new_name("kdist.experiment") == "kdist.experiment"
    for old, new in MOVED.items():
        assert not REPO.joinpath(*old.split(".")).with_suffix(".py").exists(), old
        path = REPO.joinpath(*new.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), new
