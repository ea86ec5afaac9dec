"""Fuzz: a run folder's config never runs code outside kdist's and Keras's building blocks.

Hypothesis writes run-folder configs that plant a canary (`canary`, a function of this
module that records its calls; `tf.io.gfile.rmtree` and `os.makedirs` reached through
kdist's modules, aimed at a folder that must survive) at any key, as a node or through
an interpolation of every resolver OmegaConf and Hydra register (`oc.decode`, `oc.create`,
`oc.env`, `oc.select`, `oc.dict.*`, `oc.deprecated`, `now`, `hydra`, `python_version`),
plus one a user's code registered (`kdist_fuzz_canary`), nested, quoted, escaped, inside
dicts and lists. Each config is read by the loading path of `kdist.evaluate`,
`kdist.predict` and the sidecar (in this process, everything after the config replaced by
a step that instantiates it as the command would), by a resumed run's check
(`kdist.runs.resume_check`) and by `kdist.config.trust.trusted_config` (what a resumed
search reads its stored config with). Each either refuses with a `ConfigError` or accepts
a config whose instantiation calls no canary; no refused resolver is ever called.

Path arguments (issue 43): every allowed target with a path parameter that writes
(`test_trust_writers.WRITERS`, found from the signatures) is planted with a path outside
the run folder (absolute, through `..`, through a link inside the run folder, through an
interpolation) or inside it; a config a reader accepts never gives a writer a path that
resolves (links followed) outside the run folder, checked here on what it instantiates.

`make test` runs `FAST_EXAMPLES` examples (derandomised); the `slow` variant
(`tests/slow_cases.txt`) runs `KDIST_FUZZ_EXAMPLES` (default 400).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra.core.utils import setup_globals
from hydra.utils import instantiate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from test_trust_writers import ALLOWED, WRITERS

from kdist import predict
from kdist.compat.tools_private import resolver_registry
from kdist.config.errors import ConfigError
from kdist.config.trust import SAFE_RESOLVERS, trusted_config, trusted_target
from kdist.evaluation import reopen, sidecar
from kdist.runs import resume_check

FAST_EXAMPLES = 25
CALLS: list[str] = []
INSTANTIATED: list[Any] = []
CANARY = f"{__name__}.canary"
ENV_NODE = "KDIST_FUZZ_NODE"


def canary(*args: Any, **kwargs: Any) -> None:
    """The target no reader may call."""
    CALLS.append(f"canary{args}")


def _record(name: str, resolver: Any) -> Any:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        CALLS.append(f"resolver {name}")
        return resolver(*args, **kwargs)

    return recorded


@contextlib.contextmanager
def recorded_resolvers() -> Iterator[None]:
    """Every resolver registered (Hydra's and a user's included); calls of refused ones
    are recorded in `CALLS`."""
    setup_globals()  # Hydra's `now`, `hydra`, `python_version`
    OmegaConf.register_new_resolver("kdist_fuzz_canary", lambda *a: "x", replace=True)
    owner = resolver_registry()
    saved = owner._resolvers
    owner._resolvers = {
        name: f if name in SAFE_RESOLVERS else _record(name, f) for name, f in saved.items()
    }
    try:
        yield
    finally:
        owner._resolvers = saved
        OmegaConf.clear_resolver("kdist_fuzz_canary")


# -- what Hypothesis draws ------------------------------------------------------------------


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _targets(victim: str) -> st.SearchStrategy[str]:
    """Flow-YAML nodes whose `_target_` must never be called (and one that may)."""
    return st.sampled_from(
        [
            f"{{_target_: {CANARY}, _args_: [1]}}",
            f"{{_target_: {CANARY}, _partial_: true}}",
            f"{{_target_: kdist.data.files.tf.io.gfile.rmtree, _args_: [{victim}]}}",
            f"{{_target_: kdist.data.csv_source.os.makedirs, _args_: [{victim}/made]}}",
            f"[{{_target_: {CANARY}}}]",
            f"{{_target_: keras.layers.Dense, units: 1, x: {{_target_: {CANARY}}}}}",
            "{_target_: keras.layers.Dense, units: 2}",
        ]
    )


def _paths(victim: str) -> st.SearchStrategy[str]:
    """A path outside the run folder (`<root>/run`), by every route, or one inside it."""
    root = str(Path(victim).parent)
    return st.sampled_from(
        [
            f"{victim}/keep",
            f"{victim}/made",
            f"{root}/run/../victim/made",
            f"{root}/run/link/made",  # `link` -> the victim folder (`_plant`)
            f"{root}/run/link/../../victim/keep",
            "made",  # relative: opened from this process's folder
            "${stash.outside}",
            "${oc.select:stash.outside,x}",
            f"{root}/run/sub/ok.png",
            "${stash.inside}",
        ]
    )


@st.composite
def _writers(draw: Any, victim: str) -> dict[str, Any]:
    """A node of an allowed target that writes, one of its path arguments planted."""
    target = draw(st.sampled_from(WRITERS))
    name = draw(st.sampled_from(ALLOWED[target]))
    path = draw(_paths(victim))
    return {"_target_": target, name: path if draw(st.booleans()) else [path]}


def _expressions(victim: str) -> st.SearchStrategy[str]:
    node = _targets(victim)
    leaves = st.one_of(
        node.map(lambda n: "${oc.decode:" + _quote(n) + "}"),
        node.map(lambda n: "${oc.create:" + n + "}"),
        st.just("${oc.decode:${oc.env:" + ENV_NODE + "}}"),
        st.just("${oc.env:" + ENV_NODE + "}"),
        st.just("${oc.decode:${stash.node}}"),
        st.just("${oc.create:${stash.node}}"),
        st.just("${stash.escaped}"),
        st.just("${oc.decode:${stash.escaped}}"),
        st.just("${oc.select:stash.node,x}"),
        st.just("${oc.select:missing.key,${kdist_fuzz_canary:}}"),
        st.just("${oc.dict.values:stash}"),
        st.just("${oc.dict.keys:stash}"),
        st.just("${oc.deprecated:stash.node}"),
        st.just("${kdist_fuzz_canary:a,b}"),
        st.just("\\${kdist_fuzz_canary:}"),
        st.just("${now:%Y}"),
        st.just("${python_version:}"),
        st.just("${hydra:runtime.cwd}"),
        st.just("${stash.ref}"),
        st.just("${oc.decode:${stash.plain}}"),
        st.just("${oc.select:stash.plain,{_target_: keras.layers.Dense, units: 5}}"),
        st.just("${oc.decode:'{_target_: keras.layers.Dense, units: 6}'}"),
    )

    def nest(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            inner.map(lambda e: "${oc.decode:" + _quote(e) + "}"),
            inner.map(lambda e: "${oc.decode:" + e + "}"),
            inner.map(lambda e: "${oc.select:missing," + e + "}"),
            inner.map(lambda e: "pre " + e + " post"),
            inner.map(lambda e: "${oc.create:{_target_: " + e + "}}"),
        )

    return st.recursive(leaves, nest, max_leaves=3)


def _values(victim: str) -> st.SearchStrategy[Any]:
    expression = _expressions(victim)
    parsed = _targets(victim).map(yaml.safe_load)
    return st.recursive(
        st.one_of(expression, parsed, _writers(victim)),
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3),
            st.dictionaries(st.sampled_from(["a", "_args_", "b", "_target_"]), inner, max_size=2),
            inner.map(lambda v: {"_target_": "keras.layers.Dense", "units": 1, "kernel": v}),
        ),
        max_leaves=4,
    )


KEYS = [
    "data.source",
    "data.source._target_",
    "model",
    "model.hidden",
    "trainer.loss",
    "trainer.metrics",
    "callbacks.extra",
    "strategy.devices",
    "deep.a.b.c",
]


def _config(victim: str, draw: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "strategy": {"kind": "one"},
        "data": {"source": {"_target_": "keras.layers.Dense", "units": 3}},
        "trainer": {"loss": "mse", "metrics": ["mae"]},
    }
    # Values other keys interpolate (`${stash.node}`...); each present or not.
    stash = {
        "node": draw(_targets(victim)),
        "escaped": "\\${kdist_fuzz_canary:}",
        "ref": draw(_expressions(victim)),
        "plain": "{_target_: keras.layers.Dense, units: 4}",
        "outside": draw(_paths(victim)),
        "inside": f"{Path(victim).parent}/run/sub/ok.png",
    }
    kept = draw(st.sets(st.sampled_from(sorted(stash))))
    if kept:
        cfg["stash"] = {name: stash[name] for name in sorted(kept)}
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(KEYS))
        node = cfg
        *parents, last = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = draw(_values(victim))
    return cfg


# -- the readers ------------------------------------------------------------------------------


class _Stop(Exception):
    """What a reader's replaced next step raises once it has instantiated the config."""


def _instantiate(cfg: Any) -> None:
    """What a command does with an accepted config: build every object it names."""
    INSTANTIATED.append(OmegaConf.to_container(cfg, resolve=False))
    with contextlib.suppress(Exception):  # a Dense with odd arguments fails: not the point
        instantiate(cfg, _convert_="all")
    raise _Stop


def _readers(run_dir: Path) -> dict[str, Any]:
    config = run_dir / ".hydra" / "config.yaml"

    def evaluate_reader() -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(reopen, "experiment_with_run_model", lambda r, c, **k: _instantiate(c))
            reopen.evaluate_run(run_dir)

    def predict_reader() -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(predict, "_predict_into", lambda r, c, *a: _instantiate(c))
            predict.predict_run(run_dir)

    def sidecar_reader() -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sidecar, "_evaluate_checkpoints", lambda f, c, **k: _instantiate(c))
            sidecar.watch(run_dir, poll_seconds=0.01, timeout=1)

    def resumed_run() -> None:
        # kdist.train's resume compares the saved config (resolved) with the new one.
        resume_check.check_resume(run_dir, OmegaConf.create({"trainer": {"epochs": 1}}))

    def stored_search_config() -> None:
        _instantiate(trusted_config(config, run_dir=run_dir))

    return {
        "kdist.evaluate": evaluate_reader,
        "kdist.predict": predict_reader,
        "sidecar": sidecar_reader,
        "resumed run": resumed_run,
        "resumed search (trusted_config)": stored_search_config,
    }


def _plant(root: Path, cfg: dict[str, Any]) -> Path:
    run_dir = root / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    text = yaml.safe_dump(cfg, sort_keys=False)
    (run_dir / ".hydra" / "config.yaml").write_text(text)
    (run_dir / "backup").mkdir()
    (run_dir / "backup" / "ckpt-1.index").write_bytes(b"")
    (run_dir / "backup" / "config.yaml").write_text(text)
    (run_dir / "link").symlink_to(root / "victim", target_is_directory=True)
    return run_dir


def _writer_paths(node: Any) -> list[str]:
    """Every path argument of a writer in an instantiated config, as given."""
    found: list[str] = []
    if isinstance(node, dict):
        target = node.get("_target_")
        if target in ALLOWED and target in WRITERS:
            for name in ALLOWED[target]:
                value = node.get(name)
                found.extend(v for v in (value if isinstance(value, list) else [value]) if v)
        for value in node.values():
            found.extend(_writer_paths(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_writer_paths(value))
    return found


def _outside(path: str, run_dir: Path) -> bool:
    """The test's own reading: where the path lands, links followed."""
    landed = Path(os.path.realpath(Path.cwd() / path))
    root = Path(os.path.realpath(run_dir))
    return landed != root and root not in landed.parents


def _path_config(victim: str, draw: Any) -> dict[str, Any]:
    """A config whose only planted nodes are writers (so that many are accepted), at the
    keys a run's config has, their paths inside or outside the run folder."""
    cfg: dict[str, Any] = {
        "strategy": {"kind": "one"},
        "data": {"source": {"_target_": "keras.layers.Dense", "units": 3}},
        "trainer": {"loss": "mse", "metrics": ["mae"]},
        "stash": {
            "outside": draw(_paths(victim)),
            "inside": f"{Path(victim).parent}/run/sub/ok.png",
        },
    }
    extra = draw(st.lists(_writers(victim), min_size=1, max_size=3))
    where = draw(st.sampled_from(["callbacks.extra", "model.callback", "deep.a"]))
    if where == "callbacks.extra":
        cfg["callbacks"] = {"extra": extra}
    elif where == "model.callback":
        cfg["model"] = {"_target_": "keras.layers.Dense", "units": 1, "x": extra[0]}
    else:
        cfg["deep"] = {"a": {"b": extra}}
    return cfg


def _check_one(data: Any, make: Any = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        victim = root / "victim"
        victim.mkdir()
        (victim / "keep").write_text("keep me\n")
        cfg = (make or _config)(str(victim), data.draw)
        run_dir = _plant(root, cfg)
        os.environ[ENV_NODE] = f"{{_target_: {CANARY}, _args_: [env]}}"
        CALLS.clear()
        INSTANTIATED.clear()
        outcomes = {}
        try:
            with recorded_resolvers():
                for name, reader in _readers(run_dir).items():
                    try:
                        reader()
                        outcomes[name] = "returned"
                    except ConfigError as error:
                        outcomes[name] = f"refused: {str(error)[:60]}"
                    except _Stop:
                        outcomes[name] = "instantiated"
        finally:
            os.environ.pop(ENV_NODE, None)
        assert CALLS == [], (CALLS, outcomes, cfg)
        for built in INSTANTIATED:
            escaped = [p for p in _writer_paths(built) if _outside(str(p), run_dir)]
            assert escaped == [], (escaped, outcomes, cfg)
        assert (victim / "keep").read_text() == "keep me\n", outcomes
        assert not (victim / "made").exists(), outcomes


def _fuzz_settings(examples: int, *, derandomize: bool) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.mark.filterwarnings("ignore::UserWarning")  # oc.deprecated warns, as it should
@_fuzz_settings(FAST_EXAMPLES, derandomize=True)
@given(st.data())
def test_no_reader_ever_calls_a_planted_target_or_a_refused_resolver(data):
    _check_one(data)


@pytest.mark.filterwarnings("ignore::UserWarning")
@_fuzz_settings(int(os.environ.get("KDIST_FUZZ_EXAMPLES", "400")), derandomize=False)
@given(st.data())
def test_no_reader_calls_a_canary_larger_budget(data):
    _check_one(data)


@_fuzz_settings(FAST_EXAMPLES, derandomize=True)
@given(st.data())
def test_no_reader_lets_a_writer_out_of_the_run_folder(data):
    _check_one(data, _path_config)


@_fuzz_settings(int(os.environ.get("KDIST_FUZZ_EXAMPLES", "400")), derandomize=False)
@given(st.data())
def test_no_reader_lets_a_writer_out_larger_budget(data):
    _check_one(data, _path_config)


def test_the_generator_reaches_every_outcome():
    """The fuzz is worth something: some configs are accepted and instantiated, some are
    refused for a target, some for a resolver (checked on fixed examples of each)."""
    with tempfile.TemporaryDirectory() as tmp, recorded_resolvers():
        root = Path(tmp)
        accepted = {"a": "${oc.decode:'{_target_: keras.layers.Dense, units: 2}'}", "b": "${a}"}
        assert trusted_target(trusted_config(OmegaConf.create(accepted), source="s").a._target_)
        for planted, match in (
            ({"a": "${oc.decode:'{_target_: " + CANARY + "}'}"}, "a._target_"),
            ({"a": {"b": ["${oc.create:{_target_: " + CANARY + "}}"]}}, r"a\.b\[0\]\._target_"),
            ({"a": "${oc.env:HOME}"}, "resolver 'oc.env'"),
            ({"a": "${kdist_fuzz_canary:}"}, "resolver 'kdist_fuzz_canary'"),
            ({"a": "\\${kdist_fuzz_canary:}"}, "holding an interpolation"),
        ):
            path = root / "c.yaml"
            path.write_text(yaml.safe_dump(planted))
            with pytest.raises(ConfigError, match=match):
                trusted_config(path)
        # A writer's path: outside the run folder refused, inside accepted.
        run_dir = root / "run"
        for where, refused in ((root / "victim" / "x.png", True), (run_dir / "x.png", False)):
            path.write_text(yaml.safe_dump({"a": {"_target_": WRITERS[0], "path": str(where)}}))
            if refused:
                with pytest.raises(ConfigError, match=r"^a\.path=.* points outside the run"):
                    trusted_config(path, run_dir=run_dir)
            else:
                trusted_config(path, run_dir=run_dir)
        assert CALLS == []
