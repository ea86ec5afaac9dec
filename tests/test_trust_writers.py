"""A file kdist did not write for this run never makes a writer write outside its run folder.

Issue 43: `kdist.tune.best_config(folder)` then `Experiment(cfg).fit()` accepted a planted
`best.yaml` whose `callbacks.extra` aimed `Curves` and `EpochTensorBoard` at a folder
outside the run, which they then overwrote. Every trusted target with a path argument
(found here from the signatures, as `kdist.config.trust_paths` finds them) is held to the
run folder: a path outside it, through `..`, a link or an interpolation, is refused in one
line naming the key and the path, and nothing is written. `best.yaml`'s `config_dir` must
be the folder the search recorded when it started, or inside the search folder.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
from pathlib import Path

import pytest
import yaml

import kdist
import kdist.tune
from kdist.config import ConfigError
from kdist.config.trust import TRUSTED_PREFIXES, check_trusted_targets, trusted_target
from kdist.config.trust_paths import path_parameters, writes_paths
from kdist.tuning.folder import SEARCH_SETTINGS, SEARCH_STATE

CURVES = "kdist.callbacks.curves.Curves"
BOARD = "kdist.callbacks.tensorboard.EpochTensorBoard"
# The writers issue 43 names; the search below must find each of them.
NAMED = {
    "kdist.callbacks.curves.Curves",
    "kdist.callbacks.best_model.BestModelExport",
    "kdist.callbacks.run_hparams.RunHParams",
    "kdist.callbacks.tensorboard.ProfileSteps",
    "kdist.callbacks.guards.PreemptionSave",
    "kdist.callbacks.tensorboard.EpochTensorBoard",
}


def allowed_targets_with_paths() -> dict[str, tuple[str, ...]]:
    """Every dotted name a folder's config may use (`trusted_target`) whose callable has
    a path parameter, by walking the modules under `TRUSTED_PREFIXES`."""
    found: dict[str, tuple[str, ...]] = {}
    for prefix in TRUSTED_PREFIXES:
        try:
            root = importlib.import_module(prefix.rstrip("."))
        except ImportError:
            continue
        modules = [root]
        for info in pkgutil.walk_packages(getattr(root, "__path__", []), f"{root.__name__}."):
            try:
                modules.append(importlib.import_module(info.name))
            except ImportError:
                continue
        for module in modules:
            for name, obj in vars(module).items():
                dotted = f"{module.__name__}.{name}"
                if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                    continue
                if trusted_target(dotted) and path_parameters(obj):
                    found[dotted] = path_parameters(obj)
    return found


ALLOWED = allowed_targets_with_paths()
WRITERS = sorted(
    t
    for t in ALLOWED
    if writes_paths(importlib.import_module(t.rsplit(".", 1)[0]).__dict__[t.rsplit(".", 1)[1]])
)


def test_the_search_finds_every_writer_the_issue_names():
    assert set(WRITERS) >= NAMED, sorted(NAMED - set(WRITERS))
    # The data sources read their paths; every other allowed target with one writes.
    readers = sorted(set(ALLOWED) - set(WRITERS))
    assert readers and all(t.startswith("kdist.data.") for t in readers), readers


@pytest.mark.parametrize("target", WRITERS)
def test_every_writer_is_held_to_the_run_folder(tmp_path, target):
    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    run_dir.mkdir()
    outside.mkdir()
    (run_dir / "link").symlink_to(outside, target_is_directory=True)
    for name in ALLOWED[target]:
        for path in (
            str(outside / "x"),
            f"{run_dir}/../outside/x",
            str(run_dir / "link" / "x"),
            "relative/x",  # opened from this process's folder, not the run's
        ):
            cfg = {"callbacks": {"extra": [{"_target_": target, name: path}]}}
            with pytest.raises(ConfigError) as error:
                check_trusted_targets(cfg, source="f", run_dir=run_dir)
            assert str(error.value).startswith(f"callbacks.extra[0].{name}='{path}': in f ")
            assert "\n" not in str(error.value)
        inside = {"callbacks": {"extra": [{"_target_": target, name: str(run_dir / "a" / "x")}]}}
        check_trusted_targets(inside, source="f", run_dir=run_dir)
        with pytest.raises(ConfigError, match="no run folder is given to hold it"):
            check_trusted_targets(inside, source="f")  # no run folder: no path


def test_a_path_given_positionally_or_through_an_interpolation_is_checked(tmp_path):
    from omegaconf import OmegaConf

    run_dir, outside = tmp_path / "run", str(tmp_path / "outside" / "c.png")
    cfg = OmegaConf.create(
        {
            "stash": outside,
            "a": {"_target_": CURVES, "path": "${stash}"},
            "b": {"_target_": CURVES, "_args_": ["${oc.select:stash}"]},
        }
    )
    with pytest.raises(ConfigError, match=r"^a\.path="):
        check_trusted_targets(cfg, source="f", run_dir=run_dir)
    del cfg["a"]
    with pytest.raises(ConfigError, match=r"^b\._args_\[0\]="):
        check_trusted_targets(cfg, source="f", run_dir=run_dir)


def test_a_data_source_reads_where_its_data_is(tmp_path):
    cfg = {"data": {"source": {"_target_": "kdist.data.npz", "path": "/data/x.npz"}}}
    check_trusted_targets(cfg, source="f", run_dir=tmp_path)


def _plant(search: Path, overrides: list[str], **extra) -> Path:
    search.mkdir(parents=True, exist_ok=True)
    content = {"trial_id": "0", "config_name": "train", "config_dir": None, **extra}
    content["overrides"] = overrides
    (search / "best.yaml").write_text(yaml.safe_dump(content))
    return search


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("route", ["absolute", "dotdot", "link", "interpolation"])
def test_a_planted_best_yaml_writes_nothing_outside(tmp_path, monkeypatch, route):
    """The issue's case: best_config(folder), then Experiment(cfg).fit()."""
    monkeypatch.chdir(tmp_path)
    outside, run_dir = tmp_path / "outside", tmp_path / "run"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep me\n")
    run_dir.mkdir()
    (run_dir / "link").symlink_to(outside, target_is_directory=True)
    path = {
        "absolute": str(outside / "keep.txt"),
        "dotdot": f"{run_dir}/../outside/keep.txt",
        "link": str(run_dir / "link" / "keep.txt"),
        "interpolation": "${data.stash}",
    }[route]
    extra = (
        f"callbacks.extra=[{{_target_: {CURVES}, path: '{path}'}}, "
        f"{{_target_: {BOARD}, log_dir: '{outside}/tb'}}]"
    )
    planted = ["trainer=fast_dev", "trainer.verbose=0", extra]
    if route == "interpolation":
        planted.append(f"+data.stash='{outside}/keep.txt'")
    search = _plant(tmp_path / "search", planted)
    before = _snapshot(outside)
    for overrides in ([], [f"run_dir={run_dir}"]):
        with pytest.raises(ConfigError) as error:
            cfg = kdist.tune.best_config(search, overrides=overrides)
            kdist.Experiment(cfg).fit()
        text = str(error.value)
        assert text.startswith("callbacks.extra[0].path="), text
        assert f"{outside}/keep.txt" in text or path in text
        assert "\n" not in text
    assert _snapshot(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]


def test_a_best_yaml_may_not_say_where_the_run_writes(tmp_path):
    for override in (f"run_dir={tmp_path}/elsewhere", f"hydra.run.dir={tmp_path}/elsewhere"):
        search = _plant(tmp_path / "search", ["trainer=fast_dev", override])
        with pytest.raises(ConfigError, match=r"says where the run writes"):
            kdist.tune.best_config(search)


def _recipes(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text("defaults:\n  - train\n  - _self_\n")
    return folder


def test_best_yamls_config_dir_is_the_one_the_search_recorded(tmp_path):
    search = tmp_path / "search"
    recipes = _recipes(tmp_path / "recipes")
    planted = _recipes(tmp_path / "planted")
    _plant(search, ["trainer=fast_dev"], config_name="mine", config_dir=str(planted))
    # No settings recorded, and a folder outside the search: one line.
    with pytest.raises(ConfigError) as error:
        kdist.tune.best_config(search)
    assert str(error.value).startswith(f"config_dir='{planted}': in {search}/best.yaml is not ")
    assert "\n" not in str(error.value)
    # The search recorded another folder when it started.
    (search / SEARCH_STATE).mkdir()
    settings = search / SEARCH_STATE / SEARCH_SETTINGS
    settings.write_text(yaml.safe_dump({"config_name": "mine", "config_dir": str(recipes)}))
    with pytest.raises(ConfigError, match=rf"it recorded {recipes}"):
        kdist.tune.best_config(search)
    # The recorded folder, or one inside the search folder, is accepted.
    _plant(search, ["trainer=fast_dev"], config_name="mine", config_dir=str(recipes))
    assert kdist.tune.best_config(search).trainer.epochs == 2
    inside = _recipes(search / "recipes")
    _plant(search, ["trainer=fast_dev"], config_name="mine", config_dir=str(inside))
    assert kdist.tune.best_config(search).trainer.epochs == 2
    # A link inside the search folder to a folder outside it is outside.
    os.symlink(planted, search / "linked")
    _plant(search, ["trainer=fast_dev"], config_name="mine", config_dir=str(search / "linked"))
    with pytest.raises(ConfigError, match=r"^config_dir="):
        kdist.tune.best_config(search)
    # What you trust is yours.
    assert kdist.tune.best_config(search, trust=True).trainer.epochs == 2
