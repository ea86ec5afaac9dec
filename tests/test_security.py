"""A run folder cannot be turned against its user: what reading one may run.

`kdist.evaluate`, `kdist.predict` and the sidecar evaluator rebuild a run from its
`.hydra/config.yaml`, which anyone may have written. Each test plants one way to reach
code outside kdist's and Keras's building blocks (the probe's attribute chains through
modules kdist imports, `_args_`, `_partial_`, nested targets, a model naming a function)
and checks that every reader refuses it with status 2 and one line, before any side
effect: the canary folder and its file are unchanged, the folder the attack would create
does not exist.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, compose, run_module
from omegaconf import OmegaConf

from kdist import evaluate, predict
from kdist.config.errors import ConfigError
from kdist.config.trust import check_trusted_targets, trusted_target


def _tree(root: Path) -> dict[str, str]:
    """Every file and folder under `root`, with its content's hash."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "/"
        for p in sorted(root.rglob("*"))
    }


def _attacks(canary: Path, made: Path) -> dict[str, tuple[str, Any]]:
    """Planted `(key, node)` pairs: the node replaces `key` in a composed config."""
    victim = str(canary)
    return {
        "rmtree through kdist.data.files.tf": (
            "data.source",
            {"_target_": "kdist.data.files.tf.io.gfile.rmtree", "_args_": [victim]},
        ),
        "makedirs through kdist.data.csv_source.os": (
            "data.source",
            {"_target_": "kdist.data.csv_source.os.makedirs", "_args_": [str(made)]},
        ),
        "_partial_ loss": (
            "trainer.loss",
            {"_target_": "kdist.data.files.shutil.rmtree", "_partial_": True, "path": victim},
        ),
        "nested in _args_": (
            "data.source",
            {
                "_target_": "kdist.data.digits",
                "_args_": [{"_target_": "keras.losses.os.makedirs", "_args_": [str(made)]}],
            },
        ),
        "nested under a trusted target": (
            "model",
            {
                "_target_": "kdist.models.mlp",
                "hidden": {"_target_": "keras.layers.os.remove", "_args_": [victim + "/file"]},
            },
        ),
        "a model naming a function": (
            "model",
            {"_target_": "keras.layers.Dense.__init__.__globals__"},
        ),
        "a metric through a class attribute": (
            "trainer.metrics",
            [{"_target_": "kdist.data.Source.__subclasses__"}],
        ),
        "a callback that deletes its folder": (
            "callbacks.extra",
            [{"_target_": "keras.callbacks.BackupAndRestore", "backup_dir": victim}],
        ),
        "outside kdist altogether": (
            "data.source",
            {"_target_": "shutil.rmtree", "_args_": [victim]},
        ),
    }


@pytest.fixture
def planted(tmp_path: Path):
    """A function planting one attack in a fresh run folder; returns (run_dir, canary, made)."""

    def plant(name: str) -> tuple[Path, Path, Path]:
        canary = tmp_path / f"canary-{len(list(tmp_path.iterdir()))}"
        canary.mkdir()
        (canary / "file").write_text("keep me\n")
        made = tmp_path / f"made-{canary.name}"
        key, node = _attacks(canary, made)[name]
        cfg = compose([])
        OmegaConf.update(cfg, key, node, force_add=True, merge=False)
        run_dir = tmp_path / f"run-{canary.name}"
        (run_dir / ".hydra").mkdir(parents=True)
        (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        return run_dir, canary, made

    return plant


NAMES = list(_attacks(Path("c"), Path("m")))


@pytest.mark.parametrize("name", NAMES)
def test_every_reader_refuses_each_planted_target(planted, capsys, name: str):
    run_dir, canary, made = planted(name)
    before = _tree(canary.parent)
    key = _attacks(canary, made)[name][0]
    commands = {
        "kdist.evaluate": lambda: evaluate.main([f"run_dir={run_dir}"]),
        "kdist.predict": lambda: predict.main([f"run_dir={run_dir}"]),
        "sidecar": lambda: evaluate.main(
            [f"run_dir={run_dir}", "watch=true", "poll_seconds=0.05", "timeout=5"]
        ),
    }
    for command, call in commands.items():
        with pytest.raises(SystemExit) as stopped:
            call()
        assert stopped.value.code == 2, command
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, (command, err)
        assert err[0].startswith(f"kdist: config error: {key}"), (command, err)
        assert "building blocks" in err[0] and "trust_run_dir=true" in err[0]
        assert _tree(canary.parent) == before, command  # nothing deleted, nothing made
        assert not made.exists()


def test_the_resolved_object_decides_not_the_spelling():
    # Building blocks, by their public names (re-exports of keras.src) and kdist's.
    for good in (
        "keras.losses.SparseCategoricalCrossentropy",
        "keras.optimizers.schedules.CosineDecay",
        "keras.layers.Dense",
        "kdist.data.digits",
        "kdist.data.categorical.synthetic_categorical",
        "kdist.strategies.one_device",
        "kdist.tuning.oracles.RandomSearchOracle",
    ):
        assert trusted_target(good), good
    # Spelled under a trusted prefix, resolved elsewhere: a module kdist imports, an
    # alias, a class's attribute, a private helper, a writer, a missing name.
    for bad in (
        "kdist.data.files.tf.io.gfile.rmtree",
        "kdist.data.csv_source.os.makedirs",
        "kdist.data.files.shutil.rmtree",
        "kdist.data.files.Path",
        "keras.losses.os.remove",
        "kdist.data.Source.__subclasses__",
        "kdist.callbacks.guards.NonFiniteGuard.__init__",
        "kdist.data.write_tfrecords",
        "keras.callbacks.RemoteMonitor",
        "keras.callbacks.ModelCheckpoint",
        "kdist.data.no_such_thing",
        "kdist.data..digits",
        None,
        {"_target_": "os.system"},
    ):
        assert not trusted_target(bad), bad


def test_a_users_own_override_is_theirs(tmp_path: Path):
    cfg = compose([])
    cfg.data.source = {"_target_": "kdist.data.csv_source.os.makedirs", "_args_": ["x"]}
    with pytest.raises(ConfigError, match=r"^data\.source\._target_="):
        check_trusted_targets(cfg, source="here")
    check_trusted_targets(cfg, source="here", exempt=("data",))


@pytest.mark.slow
def test_the_commands_refuse_in_their_own_process(planted, tmp_path: Path):
    run_dir, canary, _ = planted("rmtree through kdist.data.files.tf")
    before = _tree(canary.parent)
    env = {"PYTHONPATH": str(REPO)}
    for module, extra in (
        ("kdist.evaluate", []),
        ("kdist.predict", []),
        ("kdist.evaluate", ["watch=true", "poll_seconds=0.1", "timeout=20"]),
    ):
        result = run_module(
            module, [f"run_dir={run_dir}", *extra], cwd=tmp_path, env=env, timeout=180
        )
        assert result.returncode == 2, result.stderr[-2000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
        assert len(errors) == 1 and "data.source._target_" in errors[0], result.stderr
        assert "Traceback" not in result.stderr
        assert _tree(canary.parent) == before
