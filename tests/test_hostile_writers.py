"""Every keyword that reaches a kdist or Keras writer is held to the run folder (issue 52).

Issue 52: a planted `best.yaml` with `callbacks.extra=[{_target_:
kdist.callbacks.curves.RunCurves, path: <outside>}]` passed the path check, and
`Experiment(cfg).fit()` overwrote the outside file with a PNG: `RunCurves` takes `path`
through `**kwargs` and the check read only named parameters. Here every writer a folder's
config may name, under every dotted spelling that reaches it, is found by walking kdist's
and Keras's allowed modules (not listed by hand), and every way a keyword reaches a path
(by name, through `**kwargs` to a base, by position, through `*args`) is refused.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import yaml

import kdist
import kdist.tune
from kdist.config import ConfigError
from kdist.config.trust import TRUSTED_PREFIXES, check_trusted_targets, trusted_target
from kdist.config.trust_paths import PATH_WORDS, writes_paths


def _spellings() -> dict[str, object]:
    """Every dotted name under `TRUSTED_PREFIXES` that `trusted_target` accepts, with the
    object it names (one object may have several names: `kdist.callbacks.factory.RunCurves`)."""
    found: dict[str, object] = {}
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
            for name, obj in list(vars(module).items()):
                if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                    continue
                dotted = f"{module.__name__}.{name}"
                if trusted_target(dotted):
                    found[dotted] = obj
    return found


def _reaching(obj) -> set[str]:
    """Every keyword that reaches a path parameter of `obj`: its own path-named
    parameters and, when it takes `**kwargs`, those of every constructor it may pass them
    to (its bases'), plus a path-named keyword it never declared."""

    def named(fn) -> tuple[set[str], bool]:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return set(), False
        words = {
            p.name
            for p in params
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            and set(p.name.lower().split("_")) & PATH_WORDS
        }
        return words, any(p.kind == p.VAR_KEYWORD for p in params)

    own, forwards = named(obj)
    if forwards:
        own |= {"path", "filepath", "log_dir"}
        for base in getattr(obj, "__mro__", ())[1:]:
            if "__init__" in vars(base) and base is not object:
                own |= named(vars(base)["__init__"])[0]
    return own


SPELLINGS = _spellings()
WRITERS = sorted(t for t, obj in SPELLINGS.items() if writes_paths(obj) and _reaching(obj))


def test_the_walk_finds_the_writers_that_take_paths_through_kwargs():
    for name in ("kdist.callbacks.curves.RunCurves", "kdist.callbacks.factory.RunCurves"):
        assert name in WRITERS
        assert "path" in _reaching(SPELLINGS[name])
    assert "kdist.callbacks.curves.Curves" in WRITERS
    assert "kdist.callbacks.curves.RunCSVLogger" in WRITERS


@pytest.mark.parametrize("target", WRITERS)
def test_every_keyword_that_reaches_a_path_is_held_to_the_run_folder(tmp_path, target):
    run_dir, outside = tmp_path / "run", str(tmp_path / "outside" / "x")
    for name in sorted(_reaching(SPELLINGS[target])):
        cfg = {"callbacks": {"extra": [{"_target_": target, name: outside}]}}
        with pytest.raises(ConfigError) as error:
            check_trusted_targets(cfg, source="f", run_dir=run_dir)
        assert str(error.value).startswith(f"callbacks.extra[0].{name}='{outside}': in f ")
        assert "\n" not in str(error.value)
        inside = {"callbacks": {"extra": [{"_target_": target, name: str(run_dir / "x")}]}}
        check_trusted_targets(inside, source="f", run_dir=run_dir)


def test_a_positional_past_the_named_parameters_is_checked(tmp_path):
    # `*args` may pass it on to a path anywhere; a keyword-only path by position too.
    for target in ("kdist.callbacks.factory.RunCurves", "kdist.callbacks.curves.RunCSVLogger"):
        cfg = {"a": {"_target_": target, "_args_": [str(tmp_path / "o.csv")] * 4}}
        with pytest.raises(ConfigError, match=r"^a\._args_\[\d\]="):
            check_trusted_targets(cfg, source="f", run_dir=tmp_path / "run")


@pytest.mark.parametrize(
    "target", ["kdist.callbacks.curves.RunCurves", "kdist.callbacks.factory.RunCurves"]
)
def test_the_issues_best_yaml_writes_nothing_outside(tmp_path, monkeypatch, target):
    monkeypatch.chdir(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    keep = outside / "keep.txt"
    keep.write_text("keep me\n")
    search = tmp_path / "search"
    search.mkdir()
    extra = f"callbacks.extra=[{{_target_: {target}, path: '{keep}', min_interval: 0.0}}]"
    content = {"trial_id": "0", "config_name": "train", "config_dir": None}
    content["overrides"] = ["trainer=fast_dev", "trainer.verbose=0", extra]
    (search / "best.yaml").write_text(yaml.safe_dump(content))
    with pytest.raises(ConfigError) as error:
        cfg = kdist.tune.best_config(search, overrides=[f"run_dir={tmp_path / 'B'}"])
        kdist.Experiment(cfg).fit()
    text = str(error.value)
    assert text.startswith(f"callbacks.extra[0].path='{keep}': in "), text
    assert "points outside the run folder" in text and "\n" not in text
    assert keep.read_text() == "keep me\n"
    assert not Path(tmp_path / "B").exists() or not any(Path(tmp_path / "B").rglob("*.png"))
