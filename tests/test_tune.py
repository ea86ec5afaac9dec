"""`python -m kdist.tune`: keras-tuner searches whose trials are kdist training jobs.

Fast cases run searches in this process (tiny trials: trainer=fast_dev, callbacks=minimal)
and the oracle's gRPC service on loopback; the `slow` ones run the command line, check
that `python -m kdist.train` with `best.yaml`'s overrides reproduces the best trial, kill
and resume a search, and run a distributed search in two processes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import LOGICAL, REPO, compose, free_port, run_module

import kdist
from kdist.config import ConfigError
from kdist.runs.fileio import read_csv
from kdist.tuning import oracles as tuning_oracles
from kdist.tuning import run as run_search
from kdist.tuning.oracle_chief import OracleServer
from kdist.tuning.oracle_client import DeadlineOracleClient, Heartbeat, OracleUnreachable
from kdist.tuning.override_text import format_value, parse_value
from kdist.tuning.plan import TrialPlan, base_overrides, trial_config_name
from kdist.tuning.roles import Role, resolve_role
from kdist.tuning.space import Space

# Tiny trials for in-process searches (a few seconds each search).
TINY = ["trainer=fast_dev", "trainer.verbose=0", "callbacks=minimal", "tuner.verbose=0"]


def _tune_cfg(overrides):
    return compose([*TINY, *overrides], config_name="tune")


def _search(tmp_path: Path, overrides, **kwargs):
    cfg = _tune_cfg(overrides)
    return run_search(
        cfg, run_dir=tmp_path / "search", overrides=[LOGICAL, *TINY, *overrides], **kwargs
    )


# --- the search space ---------------------------------------------------------------------


def test_space_from_sweep_expressions():
    space = Space.from_config(
        {
            "optimizer": {"learning_rate": "tag(log, interval(1e-4, 1e-2))"},
            "model": {"units": "choice([64], [128, 64])", "dropout": "interval(0.0, 0.5)"},
            "model.activation": "choice(relu, tanh)",
            "trainer.global_batch_size": "range(16, 65, 16)",
            "trainer.steps_per_execution": "tag(int, interval(1, 8))",
            "data.shuffle": None,  # removed entry
        }
    )
    assert space.keys == [
        "optimizer.learning_rate",
        "model.units",
        "model.dropout",
        "model.activation",
        "trainer.global_batch_size",
        "trainer.steps_per_execution",
    ]
    hps = space.hyperparameters()
    lr = hps.get_config()["space"][0]["config"]
    assert (lr["min_value"], lr["max_value"], lr["sampling"]) == (1e-4, 1e-2, "log")
    kinds = {d.key: d.kind for d in space}
    assert kinds == {
        "optimizer.learning_rate": "float",
        "model.units": "choice",
        "model.dropout": "float",
        "model.activation": "choice",
        "trainer.global_batch_size": "int",
        "trainer.steps_per_execution": "int",
    }
    batch = next(d for d in space if d.key == "trainer.global_batch_size")
    assert (batch.low, batch.high, batch.step) == (16, 64, 16)
    units = next(d for d in space if d.key == "model.units")
    assert units.encoded and units.values == ("[64]", "[128,64]")
    overrides = space.overrides(
        {
            "optimizer.learning_rate": 0.003,
            "model.units": "[128,64]",
            "model.activation": "tanh",
            "trainer.global_batch_size": 32,
        }
    )
    assert overrides == [
        "optimizer.learning_rate=0.003",
        "model.units=[128,64]",
        "model.activation=tanh",
        "trainer.global_batch_size=32",
    ]
    cfg = kdist.compose(overrides)
    assert list(cfg.model.units) == [128, 64]
    assert cfg.optimizer.learning_rate == 0.003
    assert space.decode({"model.units": "[128,64]"}) == {"model.units": [128, 64]}


@pytest.mark.parametrize(
    "value",
    [0.1, 1e-5, 3, True, None, "relu", "a b", "true", "1", [1, 2], {"a": [1, "x y"]}, "it's"],
)
def test_values_round_trip_through_hydra_overrides(value):
    assert parse_value(format_value(value)) == value


def test_numpy_values_are_written_as_plain_numbers():
    import numpy as np

    assert format_value(np.float64(0.25)) == "0.25"
    assert format_value(np.int64(3)) == "3"
    assert format_value(np.bool_(True)) == "true"


@pytest.mark.parametrize(
    ("space", "key", "message"),
    [
        ({"optimizer": {"learning_rate": "interval(1e-2)"}}, "optimizer.learning_rate", "parsed"),
        ({"optimizer": {"learning_rate": "interval(0.5, 0.1)"}}, "optimizer.learning_rate", "low"),
        (
            {"optimizer": {"learning_rate": "tag(log, interval(0, 1))"}},
            "optimizer.learning_rate",
            "positive",
        ),
        ({"model": {"dropout": "tag(fancy, interval(0, 1))"}}, "model.dropout", "unknown tag"),
        ({"model": {"units": "choice()"}}, "model.units", ""),
        ({"model": {"width": "range(5, 1, 1)"}}, "model.width", "empty range"),
        ({}, "tuner.space", "nothing to tune"),
    ],
)
def test_bad_space_names_the_key(space, key, message):
    with pytest.raises(ConfigError) as caught:
        Space.from_config(space)
    assert key in caught.value.key
    assert message in str(caught.value)


def test_space_keys_must_exist_in_the_training_config():
    space = Space.from_config({"model": {"widht": "choice(8, 16)"}})
    with pytest.raises(ConfigError, match=r"tuner\.space\.model\.widht"):
        space.check_keys(compose())


def test_trial_overrides_replace_the_searchs_own(tmp_path: Path):
    space = Space.from_config(
        {"model": {"width": "choice(4, 8)"}, "optimizer": {"learning_rate": "interval(1e-4, 1)"}}
    )
    given = [
        "tuner.max_trials=3",
        "tuner/space=cnn",
        "+model.width=16",
        "optimizer.learning_rate=0.1",
        "run_dir=x",
        "trainer.epochs=2",
        "strategy=mirrored",
    ]
    plan = TrialPlan(
        space=space,
        overrides=base_overrides(given),
        config_name=trial_config_name("tune", None),
        objective={"name": "val_loss", "direction": "min"},
    )
    assert plan.config_name == "train"
    assert plan.base == [
        "+model.width=16",
        "optimizer.learning_rate=0.1",
        "trainer.epochs=2",
        "strategy=mirrored",
    ]
    plan.objective_overrides(compose(["strategy=mirrored"]))
    values = {"model.width": 8, "optimizer.learning_rate": 0.01, "tuner/epochs": 3}
    assert plan.trial_overrides(values) == [
        "strategy=mirrored",
        "objective.name=val_loss",
        "objective.direction=min",
        "+model.width=8",
        "optimizer.learning_rate=0.01",
        "trainer.epochs=3",
    ]
    assert plan.hparams(values) == {
        "model.width": 8,
        "optimizer.learning_rate": 0.01,
        "trainer.epochs": 3,
    }
    assert plan.command(["model.units=[1,2]"]) == "python -m kdist.train 'model.units=[1,2]'"
    recipe = TrialPlan(space=space, config_name="tune_x", config_dir=str(tmp_path))
    assert recipe.command([]) == f"python -m kdist.train -cd {tmp_path} -cn tune_x"
    assert trial_config_name("tune_bayesian", REPO / "recipes") == "tune_bayesian"


# --- configs ------------------------------------------------------------------------------


@pytest.mark.parametrize("tuner", ["random", "bayesian", "hyperband"])
def test_tuner_options_compose_and_build(tuner):
    from kdist.tuning.driver import check

    cfg = compose([f"tuner={tuner}"], config_name="tune")
    space = check(cfg)
    oracle = tuning_oracles.build(cfg.tuner, hyperparameters=space.hyperparameters())
    assert oracle.objective.name == "val_accuracy"
    assert oracle.objective.direction == "max"
    assert oracle.seed == cfg.runtime.seed
    assert oracle.max_trials == cfg.tuner.max_trials


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("tuner.max_trials=0", "tuner.max_trials"),
        ("tuner.objective.direction=up", "tuner.objective.direction"),
        ("tuner.distributed.timeout=0", "tuner.distributed.timeout"),
        ("+tuner.hyperparameters=1", "tuner.hyperparameters"),
        ("tuner.factor=1", "tuner.factor"),
    ],
)
def test_bad_tuner_settings_name_the_key(override, key):
    from kdist.tuning.driver import check

    extra = ["tuner=hyperband"] if "factor" in override else []
    cfg = compose([*extra, override], config_name="tune")
    with pytest.raises(ConfigError) as caught:
        check(cfg)
    assert caught.value.key == key


def test_objective_must_be_a_metric_of_the_run(tmp_path: Path):
    cfg = compose(["objective.name=val_f1", *TINY[:3]])
    # Checked once the model is built (before training): a model logs its own metrics.
    with pytest.raises(ConfigError, match=r"objective\.name='val_f1': is not a metric"):
        kdist.Experiment(cfg, run_dir=tmp_path).build_model()


def test_a_validation_objective_without_validation_stops_the_search(tmp_path: Path):
    from kdist.tuning.tuner import FatalConfigError

    with pytest.raises(FatalConfigError, match=r"tuner\.objective\.name='val_accuracy'"):
        # An explicit validation objective (`auto` would pick `accuracy` here).
        _search(
            tmp_path,
            ["trainer.validation=false", "objective.name=val_accuracy", "tuner.max_trials=2"],
        )


# --- searches in this process ---------------------------------------------------------------


def test_random_search_writes_everything_and_reproduces(tmp_path: Path):
    result = _search(tmp_path, ["tuner.max_trials=3"])
    run_dir = result.run_dir
    rows = read_csv(run_dir / "trials.csv")
    assert [r["trial_id"] for r in rows] == ["0", "1", "2"]
    assert (run_dir / "trials.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {r["status"] for r in rows} == {"COMPLETED"}
    assert {r["tuner_id"] for r in rows} == {"tuner0"}
    for column in ("val_accuracy", "optimizer.learning_rate", "model.units", "model.dropout"):
        assert all(r[column] for r in rows), column
    assert all(r["objective"] == r["val_accuracy"] for r in rows)
    assert {r["objective_name"] for r in rows} == {"val_accuracy"}
    # Every trial's config, metrics and record; keras-tuner's state for a resume.
    for row in rows:
        folder = run_dir / row["run_dir"]
        assert (folder / "config.yaml").is_file()
        metrics = json.loads((folder / "metrics.json").read_text())
        record = json.loads((folder / "result.json").read_text())
        assert record["metrics"]["val_accuracy"] == metrics["validation"]["accuracy"]
        assert record["status"] == "COMPLETED"
    assert (run_dir / "keras_tuner" / "oracle.json").is_file()
    assert len(list((run_dir / "keras_tuner").glob("trial_*/trial.json"))) == 3

    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    scores = [float(r["val_accuracy"]) for r in rows]
    assert best["objective"]["value"] == pytest.approx(max(scores))
    assert best["trial_id"] == rows[scores.index(max(scores))]["trial_id"]
    assert best["command"].startswith("python -m kdist.train ")
    assert result.best == best
    # The overrides reproduce the trial's objective (seeds fixed by runtime.seed).
    cfg = kdist.compose(best["overrides"])
    experiment = kdist.Experiment(cfg, run_dir=tmp_path / "again")
    experiment.fit()
    assert experiment.objective() == pytest.approx(best["objective"]["value"], abs=1e-6)

    # TensorBoard HParams: the experiment at the root, one session per trial.
    from tensorboard.backend.event_processing import event_accumulator

    def plugin_tags(folder: Path) -> set[str]:
        acc = event_accumulator.EventAccumulator(str(folder))
        acc.Reload()
        return set(acc.PluginTagToContent("hparams"))

    assert "_hparams_/experiment" in plugin_tags(run_dir / "trials")
    for row in rows:
        assert "_hparams_/session_start_info" in plugin_tags(
            run_dir / row["run_dir"] / "tensorboard"
        )


def test_failed_trials_are_recorded_and_the_search_goes_on(tmp_path: Path):
    result = _search(
        tmp_path,
        [
            "model=custom",
            "model._target_=helpers.flaky_model",
            "+model.mode=ok",
            "+model.width=8",
            "~tuner/space",
            "+tuner.space={model:{mode:'choice(ok, diverge, error)',width:'choice(4, 8, 12, 16)'}}",
            "tuner.max_trials=6",
            "tuner.max_consecutive_failed_trials=6",
        ],
    )
    rows = read_csv(result.run_dir / "trials.csv")
    assert len(rows) == 6
    by_mode = {}
    for row in rows:
        by_mode.setdefault(row["model.mode"], []).append(row)
    assert set(by_mode) == {"ok", "diverge", "error"}, rows
    assert {r["status"] for r in by_mode["ok"]} == {"COMPLETED"}
    for row in by_mode["diverge"]:
        assert row["status"] == "FAILED"
        assert "nan" in row["reason"].lower()
    for row in by_mode["error"]:
        assert row["status"] == "FAILED"
        assert "flaky_model cannot build mode='error'" in row["reason"]
        assert (result.run_dir / row["run_dir"] / "error.txt").is_file()
        assert (result.run_dir / row["run_dir"] / "config.yaml").is_file()
    assert result.stop_reason is None
    assert result.best is not None and "+model.mode=ok" in result.best["overrides"]


def test_the_search_stops_after_consecutive_failures(tmp_path: Path):
    result = _search(
        tmp_path,
        [
            "model=custom",
            "model._target_=helpers.flaky_model",
            "+model.mode=ok",
            "+model.width=8",
            "~tuner/space",
            "+tuner.space={model:{mode:'choice(diverge, error)',width:'choice(4, 8, 12, 16)'}}",
            "tuner.max_trials=8",
            "tuner.max_consecutive_failed_trials=2",
        ],
    )
    rows = read_csv(result.run_dir / "trials.csv")
    assert [r["status"] for r in rows] == ["FAILED", "FAILED"]
    assert all(r["reason"] for r in rows)
    assert result.stop_reason is not None
    assert "2 trials failed in a row (tuner.max_consecutive_failed_trials=2)" in result.stop_reason
    assert result.best is None and not (result.run_dir / "best.yaml").exists()


def test_a_search_resumes_without_rerunning_finished_trials(tmp_path: Path):
    first = _search(tmp_path, ["tuner.max_trials=1"])
    started = {
        r["trial_id"]: json.loads((first.run_dir / r["run_dir"] / "result.json").read_text())[
            "started"
        ]
        for r in read_csv(first.run_dir / "trials.csv")
    }
    # As if killed between keras-tuner's two saves at the end of trial 0: its state still
    # lists the finished trial as ongoing.
    state_file = first.run_dir / "keras_tuner" / "oracle.json"
    state = json.loads(state_file.read_text())
    state["ongoing_trials"] = {"tuner0": "0"}
    state_file.write_text(json.dumps(state))
    second = _search(tmp_path, ["tuner.max_trials=2"])
    rows = read_csv(second.run_dir / "trials.csv")
    assert [r["trial_id"] for r in rows] == ["0", "1"]
    for trial_id, when in started.items():
        record = json.loads((second.run_dir / f"trials/trial_{trial_id}/result.json").read_text())
        assert record["started"] == when  # not run again
    # Other settings in the same run directory are refused, not mixed in.
    with pytest.raises(ConfigError, match="holds a search with other settings"):
        _search(tmp_path, ["tuner.max_trials=5", "optimizer=sgd"])
    # ... unless the search starts afresh.
    fresh = _search(tmp_path, ["tuner.max_trials=1", "optimizer=sgd", "tuner.overwrite=true"])
    rows = read_csv(fresh.run_dir / "trials.csv")
    assert [r["trial_id"] for r in rows] == ["0"]
    assert "optimizer=sgd" in fresh.best["overrides"]


@pytest.mark.slow
def test_hyperband_trials_get_their_epoch_budget(tmp_path: Path):
    result = _search(
        tmp_path,
        [
            "tuner=hyperband",
            "trainer.epochs=3",
            "tuner.max_trials=4",
            "tuner.hyperband_iterations=2",
        ],
    )
    rows = read_csv(result.run_dir / "trials.csv")
    assert 2 <= len(rows) <= 4
    for row in rows:
        metrics = json.loads((result.run_dir / row["run_dir"] / "metrics.json").read_text())
        assert metrics["epochs"] == int(row["trainer.epochs"])
    assert (
        f"trainer.epochs={result.best['hyperparameters']['trainer.epochs']}"
        in (result.best["overrides"])
    )


# --- distribution: roles, deadlines, the oracle service on loopback --------------------------


def test_roles_from_keras_tuner_variables_and_from_the_cluster():
    assert resolve_role({}) == Role()
    env = {
        "KERASTUNER_TUNER_ID": "chief",
        "KERASTUNER_ORACLE_IP": "127.0.0.1",
        "KERASTUNER_ORACLE_PORT": "9000",
    }
    chief = resolve_role(env)
    assert chief.is_chief and chief.address == "127.0.0.1:9000"
    assert chief.environment() == env
    assert resolve_role({**env, "KERASTUNER_TUNER_ID": "tuner1"}).is_chief is False
    with pytest.raises(ConfigError, match="KERASTUNER_ORACLE_PORT"):
        resolve_role({**env, "KERASTUNER_ORACLE_PORT": "x"})
    with pytest.raises(ConfigError, match="KERASTUNER_TUNER_ID"):
        resolve_role({k: v for k, v in env.items() if k != "KERASTUNER_TUNER_ID"})

    cluster = {"worker": ["127.0.0.1:7001", "127.0.0.1:7002"]}

    def tf_config(index):
        return {
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            )
        }

    first, second = resolve_role(tf_config(0)), resolve_role(tf_config(1))
    assert (first.tuner_id, first.is_chief, first.address) == ("chief", True, "127.0.0.1:7001")
    assert (second.tuner_id, second.is_chief, second.address) == (
        "worker1",
        False,
        "127.0.0.1:7001",
    )
    assert first.expected_tuners == 2
    assert first.bind_address() == "127.0.0.1:7001"
    with pytest.raises(ConfigError, match="TF_CONFIG"):
        resolve_role(
            {
                "TF_CONFIG": json.dumps(
                    {
                        "cluster": {**cluster, "ps": ["127.0.0.1:7003"]},
                        "task": {"type": "worker", "index": 1},
                    }
                )
            }
        )


def _loopback_oracle(worker_timeout: float = 60.0):
    space = Space.from_config({"optimizer": {"learning_rate": "interval(1e-4, 1e-2)"}})
    cfg = compose(["tuner.max_trials=2", "tuner.verbose=0"], config_name="tune")
    oracle = tuning_oracles.build(cfg.tuner, hyperparameters=space.hyperparameters())
    return oracle


def test_oracle_service_on_loopback_with_deadlines(tmp_path: Path):
    oracle = _loopback_oracle()
    oracle._set_project_dir(str(tmp_path), "kt")
    address = f"127.0.0.1:{free_port()}"
    server = OracleServer(oracle, bind=address, worker_timeout=60).start()
    client = DeadlineOracleClient(
        oracle, address=address, tuner_id="tuner1", timeout=2, connect_timeout=5
    )
    try:
        assert {hp.name for hp in client.get_space().space} == {"optimizer.learning_rate"}
        trial = client.create_trial("tuner1")
        assert trial.status == "RUNNING"
        client.update_trial(trial.trial_id, {"val_accuracy": 0.5, "loss": 1.0})
        trial.status = "COMPLETED"
        client.end_trial(trial)
        assert oracle.trials[trial.trial_id].status == "COMPLETED"
        assert oracle.trial_tuners[trial.trial_id] == "tuner1"
        assert server.tuners_seen() == {"tuner1"}
    finally:
        server.stop(grace=0)
    # A dead chief: the next call fails at its deadline instead of waiting an hour.
    started = time.monotonic()
    with pytest.raises(OracleUnreachable, match="did not answer CreateTrial within 2 s"):
        client.create_trial("tuner1")
    assert time.monotonic() - started < 10
    # The heartbeat notices it too.
    with Heartbeat(client, trial.trial_id, interval=0.2) as heartbeat:
        assert heartbeat.lost.wait(10)
    assert isinstance(heartbeat.error, OracleUnreachable)
    client.close()


def test_the_chief_fails_the_trial_of_a_silent_worker(tmp_path: Path):
    oracle = _loopback_oracle()
    oracle._set_project_dir(str(tmp_path), "kt")
    address = f"127.0.0.1:{free_port()}"
    server = OracleServer(oracle, bind=address, worker_timeout=1.0).start()
    client = DeadlineOracleClient(
        oracle, address=address, tuner_id="tuner1", timeout=2, connect_timeout=5
    )
    try:
        trial = client.create_trial("tuner1")  # ... and the worker dies
        started = time.monotonic()
        assert server.drain(poll=0.05) == ["tuner1"]
        assert 0.9 < time.monotonic() - started < 10
        lost = oracle.trials[trial.trial_id]
        assert lost.status == "FAILED"
        assert "tuner tuner1 was lost" in lost.message
        assert not oracle.ongoing_trials
    finally:
        server.stop(grace=0)
        client.close()


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["tuner.max_trials=0"], {}, "tuner.max_trials=0: must be a positive number"),
        (
            ["tuner.space.model.units=choice(1,2)"],
            {},
            "tuner.space.model.units='choice(1,2)': is a sweep expression that Hydra would "
            "read itself; quote it for the tuner: 'tuner.space.model.units=\"choice(1,2)\"'",
        ),
        (
            ["'tuner.space.model.units=\"choice()\"'"],
            {},
            "tuner.space.model.units='choice()': cannot be parsed",
        ),
        (
            [],
            {
                "TF_CONFIG": json.dumps(
                    {
                        "cluster": {"worker": ["127.0.0.1:7001", "127.0.0.1:7002"]},
                        "task": {"type": "worker", "index": 1},
                    }
                )
            },
            "hydra.run.dir: is needed by worker 1 of a distributed search",
        ),
    ],
    ids=["max_trials", "unquoted-sweep", "empty-choice", "worker-without-run-dir"],
)
def test_tune_command_bad_config_exits_2_with_one_line(argv, env, line, monkeypatch, capsys):
    import kdist.tune

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["kdist.tune", *(a.strip("'") for a in argv)])
    with pytest.raises(SystemExit) as caught:
        kdist.tune.main()
    assert caught.value.code == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("kdist:")]
    assert len(lines) == 1 and lines[0].startswith(f"kdist: config error: {line}"), lines


def _tune_and_reproduce(tmp_path: Path, overrides: list[str], *, timeout: float = 600):
    run_dir = tmp_path / "tune"
    done = run_module(
        "kdist.tune",
        [*overrides, "tuner.verbose=0", "trainer.verbose=0", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "reproduce it with: python -m kdist.train" in done.stdout
    rows = read_csv(run_dir / "trials.csv")
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    again = tmp_path / "again"
    train = run_module(
        "kdist.train", [*best["overrides"], f"hydra.run.dir={again}"], cwd=tmp_path, timeout=300
    )
    assert train.returncode == 0, train.stderr[-3000:]
    metrics = json.loads((again / "metrics.json").read_text())
    reproduced = metrics["objective"]["value"]
    assert metrics["objective"]["name"] == best["objective"]["name"]
    assert abs(reproduced - best["objective"]["value"]) <= 0.01, (reproduced, best)
    return run_dir, rows, best


@pytest.mark.slow
def test_tune_command_random_on_digits_and_best_yaml_reproduces(tmp_path: Path):
    _, rows, best = _tune_and_reproduce(
        tmp_path, ["tuner=random", "tuner.max_trials=4", "trainer.epochs=2"]
    )
    assert len(rows) == 4 and {r["status"] for r in rows} == {"COMPLETED"}
    assert best["objective"]["value"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ["tuner=random", "strategy=mirrored", "runtime.logical_devices=2"],
        ["tuner=bayesian", "tuner.num_initial_points=2"],
        ["tuner=hyperband", "tuner.hyperband_iterations=2"],
        ["tuner=bayesian", "strategy=mirrored", "runtime.logical_devices=2"],
        ["tuner=random", "strategy=auto"],
    ],
    ids=["random-mirrored", "bayesian", "hyperband", "bayesian-mirrored", "random-auto"],
)
def test_tune_command_per_tuner_and_strategy_reproduces(tmp_path: Path, overrides):
    run_dir, rows, _ = _tune_and_reproduce(
        tmp_path, [*overrides, "tuner.max_trials=4", "trainer.epochs=2"]
    )
    assert 2 <= len(rows) <= 4 and {r["status"] for r in rows} == {"COMPLETED"}
    if "strategy=mirrored" in overrides:
        metrics = json.loads((run_dir / rows[0]["run_dir"] / "metrics.json").read_text())
        assert metrics["num_replicas"] == 2


@pytest.mark.slow
def test_a_killed_search_resumes_without_rerunning_finished_trials(tmp_path: Path):
    run_dir = tmp_path / "tune"
    args = [
        "tuner.max_trials=4",
        "trainer.epochs=2",
        "tuner.verbose=0",
        "trainer.verbose=0",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.Popen(
        [sys.executable, "-m", "kdist.tune", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        finished: list[dict] = []
        while time.monotonic() < deadline and process.poll() is None:
            if (run_dir / "trials.csv").is_file():
                finished = [
                    r for r in read_csv(run_dir / "trials.csv") if r["status"] == "COMPLETED"
                ]
                if len(finished) >= 2:
                    break
            time.sleep(0.05)
        assert len(finished) >= 2 and process.poll() is None, "the search ended before the kill"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    killed_after = {r["trial_id"] for r in finished}
    started = {
        t: json.loads((run_dir / f"trials/trial_{t}/result.json").read_text())["started"]
        for t in killed_after
    }
    done = run_module("kdist.tune", args, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_csv(run_dir / "trials.csv")
    assert [r["trial_id"] for r in rows] == ["0", "1", "2", "3"]
    assert {r["status"] for r in rows} == {"COMPLETED"}
    for trial_id, when in started.items():
        record = json.loads((run_dir / f"trials/trial_{trial_id}/result.json").read_text())
        assert record["started"] == when, f"trial {trial_id} ran again"
    log = (run_dir / "tune.log").read_text()
    resumed = log.split("resuming the search")[-1]
    for trial_id in killed_after:
        assert f"trial {trial_id} on tuner0:" not in resumed


def _tuner_process(tmp_path: Path, index: int, cluster: dict, args: list[str]) -> subprocess.Popen:
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
    }
    with open(tmp_path / f"worker{index}.log", "w") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "kdist.tune", *args],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(processes):
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.multiworker
def test_launch_runs_a_distributed_search_on_both_workers(tmp_path: Path, monkeypatch):
    """`python -m kdist.launch --workers 2 --module kdist.tune`: the chief serves the
    oracle and runs trials, worker 1 runs trials too."""
    import io

    from kdist.launch import run as launch

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "tune"
    output = io.StringIO()
    code = launch(
        2,
        [
            "tuner.max_trials=4",
            "trainer.epochs=2",
            "tuner.verbose=0",
            "trainer.verbose=0",
            "tuner.distributed.timeout=30",
        ],
        module="kdist.tune",
        run_dir=run_dir,
        timeout=600,
        output=output,
    )
    assert code == 0, output.getvalue()[-4000:]
    rows = read_csv(run_dir / "trials.csv")
    assert len(rows) == 4 and {r["status"] for r in rows} == {"COMPLETED"}
    assert {r["tuner_id"] for r in rows} == {"chief", "worker1"}
    for row in rows:
        record = json.loads((run_dir / row["run_dir"] / "result.json").read_text())
        assert record["tuner_id"] == row["tuner_id"]
        assert (run_dir / row["run_dir"] / "metrics.json").is_file()
    assert (run_dir / "best.yaml").is_file()
    # Hydra's own files in the shared run directory are the chief's only.
    assert (run_dir / ".hydra").is_dir() and (run_dir / "tune.log").is_file()
    assert "[worker 1]" in output.getvalue() and "trial" in (run_dir / "tune.log").read_text()


@pytest.mark.slow
@pytest.mark.multiworker
def test_a_worker_does_not_wait_forever_for_a_dead_chief(tmp_path: Path):
    run_dir = tmp_path / "tune"
    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    args = [
        "tuner.max_trials=50",
        "trainer.epochs=50",
        "tuner.verbose=0",
        "trainer.verbose=0",
        "tuner.distributed.timeout=5",
        "tuner.distributed.heartbeat=1",
        "tuner.distributed.connect_timeout=120",
        f"hydra.run.dir={run_dir}",
    ]
    processes = [_tuner_process(tmp_path, i, cluster, args) for i in range(2)]
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            records = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/result.json")]
            if any(r["tuner_id"] == "worker1" for r in records):
                break
            time.sleep(0.2)
        else:
            pytest.fail("worker 1 never started a trial")
        os.killpg(processes[0].pid, signal.SIGKILL)  # the chief dies mid-search
        killed = time.monotonic()
        code = processes[1].wait(timeout=120)
        waited = time.monotonic() - killed
    finally:
        _stop(processes)
    log = (tmp_path / "worker1.log").read_text()
    assert code == 1, log[-3000:]
    assert "did not answer" in log and "tuner.distributed.timeout" in log
    assert waited < 60, waited


def test_tune_recipes_compose():
    for path in sorted((REPO / "recipes").glob("tune_*.yaml")):
        cfg = compose([], config_name=path.stem, config_dir=REPO / "recipes")
        from kdist.tuning.driver import check

        space = check(cfg)
        space.check_keys(cfg)
        assert math.isfinite(float(cfg.tuner.max_trials))


def test_the_tuning_package_exports_what_users_call():
    """`kdist.tuning` re-exports the search and its result; the parts stay in their modules."""
    import kdist.tuning

    assert kdist.tuning.__all__ == ["SearchResult", "Tuner", "load_best", "run", "search"]
    assert kdist.tuning.run is run_search
    assert kdist.tuning.SearchResult.__module__ == "kdist.tuning.driver"
    # The notebook's search, also as kdist.tune.search (imported on first use).
    import kdist.tune

    assert kdist.tune.search is kdist.tuning.search
    # The best trial read back through the trust check, also as kdist.tune.best_config.
    assert kdist.tune.best_config is kdist.tuning.load_best
    assert kdist.tuning.load_best.__module__ == "kdist.tuning.results"
    assert kdist.tuning.Tuner.__module__ == "kdist.tuning.notebook"
