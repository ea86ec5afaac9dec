"""Bad input exits with status 2 and one line naming the key, before training starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import LOGICAL, compose, run_module

import kdist
from kdist.config import ConfigError
from kdist.train import precheck


def _precheck_error(capsys, overrides: list[str]) -> str:
    with pytest.raises(SystemExit) as raised:
        precheck([LOGICAL, *overrides])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("strategy.foo=1", "strategy.foo: unknown key"),
        ("model.foo=1", "model.foo: unknown key; valid keys: units, dropout, activation"),
        ("data.foo=1", "data.foo: unknown key"),
        ("optimizer.foo=1", "optimizer.foo: unknown key"),
        ("trainer.foo=1", "trainer.foo: unknown key"),
        ("runtime.foo=1", "runtime.foo: unknown key"),
        ("callbacks.foo=1", "callbacks.foo: unknown key"),
        ("callbacks.tensorboard.foo=1", "callbacks.tensorboard.foo: unknown key"),
        ("+data.source.foo=1", "data.source.foo: unknown key for kdist.data.digits"),
        ("+model.source=1", "model.source: unknown key"),
    ],
)
def test_unknown_key(capsys, override, expected):
    assert expected in _precheck_error(capsys, [override])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.epochs=abc", "trainer.epochs"),
        ("trainer.global_batch_size=1.5", "trainer.global_batch_size"),
        ("runtime.seed=x", "runtime.seed"),
        ("data.cache=maybe", "data.cache"),
        ("optimizer.learning_rate=fast", "optimizer.learning_rate"),
        ("model.units=12", "model.units"),
    ],
)
def test_wrong_type(capsys, override, key):
    err = _precheck_error(capsys, [override])
    assert key in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optimizer.learning_rate=0", "optimizer.learning_rate=0.0: must be a positive number"),
        ("optimizer.learning_rate=-1e-3", "optimizer.learning_rate=-0.001: must be a positive"),
        ("trainer.global_batch_size=0", "trainer.global_batch_size=0: must be a positive number"),
        ("trainer.global_batch_size=-8", "trainer.global_batch_size=-8: must be a positive"),
        ("trainer.epochs=0", "trainer.epochs=0: must be a positive number"),
        ("trainer.steps_per_execution=0", "trainer.steps_per_execution=0"),
        ("runtime.logical_devices=0", "runtime.logical_devices=0"),
        ("runtime.intra_op_threads=0", "runtime.intra_op_threads=0: must be a positive number"),
        ("runtime.inter_op_threads=-2", "runtime.inter_op_threads=-2: must be a positive"),
        ("runtime.mixed_precision=fp8", "use one of: null, mixed_float16, mixed_bfloat16"),
        ("strategy=mirrored strategy.cross_device_ops=magic", "strategy.cross_device_ops='magic'"),
        ("data.shard_policy=sometimes", "data.shard_policy='sometimes'"),
        ("model=nope", "model=nope: no such option; available: cnn, custom, mlp"),
        ("model=custom", "model._target_: has no value"),
        ("model=custom model._target_=no.such.fn", "model._target_='no.such.fn': cannot be"),
        # issue 13, item 8: these were tracebacks (rc 1) or minutes of start-up.
        ("callbacks.checkpoint.keep=0", "callbacks.checkpoint.keep=0: must be a positive integer"),
        ("callbacks.backup.every_n_steps=-1", "callbacks.backup.every_n_steps=-1: must be an"),
        ("data.source.validation_fraction=1.5", "data.source.validation_fraction=1.5: must be in"),
        ("runtime.logical_devices=1000", "runtime.logical_devices=1000: is more than 64"),
        (
            "callbacks.extra=[{_target_:argparse.Namespace}]",
            "callbacks.extra[0]._target_='argparse.Namespace': is not a Callback class",
        ),
    ],
)
def test_bad_values(capsys, override, message):
    assert message in _precheck_error(capsys, override.split())


def test_batch_not_divisible_by_replicas(tmp_path: Path):
    cfg = compose(["strategy=mirrored", "trainer.global_batch_size=63", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError) as raised:
        kdist.Experiment(cfg)
    assert str(raised.value) == (
        "trainer.global_batch_size=63: is not divisible by the 2 replicas; "
        "use a multiple of 2, e.g. 62"
    )


def test_logical_devices_after_tensorflow_initialised(tmp_path: Path):
    kdist.Experiment(compose([f"run_dir={tmp_path}"]))  # initialises TF with 2 devices
    cfg = kdist.compose(["runtime.logical_devices=3", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError) as raised:
        kdist.Experiment(cfg)
    message = str(raised.value)
    assert message.startswith("runtime.logical_devices=3: TensorFlow is already initialised")
    assert "restart" in message


def test_device_that_does_not_exist(tmp_path: Path):
    cfg = compose(["strategy=mirrored", "strategy.devices=[/cpu:0,/cpu:9]", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError) as raised:
        kdist.Experiment(cfg)
    assert "device '/cpu:9' does not exist" in str(raised.value)
    assert "/cpu:0, /cpu:1" in str(raised.value)
    cfg = compose(["strategy=one_device", "strategy.device=/gpu:3", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"strategy.device=.*'/gpu:3' does not exist"):
        kdist.Experiment(cfg)


def test_batch_larger_than_the_data(tmp_path: Path):
    cfg = compose(["trainer.global_batch_size=4096", f"run_dir={tmp_path}"])
    exp = kdist.Experiment(cfg)  # the config's data is read at its first use
    with pytest.raises(ConfigError, match="larger than the 1438 training examples"):
        exp.fit()
    assert not list(tmp_path.rglob("*.weights.h5")) and not list(tmp_path.rglob("*.index"))


def test_model_target_returning_something_else(tmp_path: Path):
    cfg = compose(["model=custom", "model._target_=helpers.not_a_model", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"returned str, not a keras\.Model"):
        kdist.Experiment(cfg).build_model()


def test_cli_exits_2_with_one_line_before_training(tmp_path: Path):
    # Composition-time error, and one that needs the strategy (replica count) to see.
    for args, needle in [
        (["trainer.global_batch_size=-1"], "trainer.global_batch_size=-1"),
        (
            ["strategy=mirrored", LOGICAL, "trainer.global_batch_size=33"],
            "trainer.global_batch_size=33: is not divisible by the 2 replicas",
        ),
    ]:
        result = run_module("kdist.train", args, cwd=tmp_path, timeout=120)
        assert result.returncode == 2, result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
        assert errors == [f"kdist: config error: {errors[0].split(': ', 2)[2]}"]
        assert needle in errors[0]
        assert "Epoch" not in result.stdout
        assert not list(tmp_path.glob("outputs/*/*/metrics.json"))


def test_a_target_that_does_not_import_is_one_line_on_the_command_line(tmp_path: Path):
    # Hydra's `get_method` logged three lines of its own ("Error getting callable at
    # ...") before kdist's one; the in-process checks above never saw them (pytest's
    # log capture took them).
    result = run_module(
        "kdist.train", ["model=custom", "model._target_=no_such_module.build"], cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "kdist: config error: model._target_='no_such_module.build': cannot be imported "
        "(ImportError); give the full dotted path of a function or class that is installed"
    ]


def test_callback_factory_returning_something_else(tmp_path: Path):
    cfg = compose(["callbacks.extra=[{_target_:time.time}]", f"run_dir={tmp_path}"])
    experiment = kdist.Experiment(cfg)
    with pytest.raises(ConfigError, match=r"callbacks.extra\[0\]._target_=.*returned float, not a"):
        experiment.fit()


def test_run_dir_that_is_a_file_or_under_one(capsys, tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = _precheck_error(capsys, [f"hydra.run.dir={blocker}"])
    assert err.startswith(f"kdist: config error: hydra.run.dir='{blocker}': is not a folder")
    err = _precheck_error(capsys, [f"hydra.run.dir={blocker}/run"])
    assert f"({blocker} is a file)" in err


def test_run_dir_read_only(capsys, tmp_path: Path, monkeypatch):
    # Root may write anywhere, so the permission answer is simulated.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    err = _precheck_error(capsys, [f"hydra.run.dir={tmp_path}/run"])
    assert f"hydra.run.dir='{tmp_path}/run': cannot be written ({tmp_path} is read-only)" in err
