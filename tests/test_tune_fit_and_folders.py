"""keras-tuner's `HyperModel.fit` in kdist's searches; one owner per search folder; the
best trial read back through the trust check; `tuner.trial_timeout`; a resume's overrides
in another order.

The searches are tiny (2 trials of a few steps on the digits, about 5-15 s each on 2
cores); the folder rules start real processes (a lock holder, `python -m kdist.tune`,
`python -m kdist.train`), each bounded by a timeout and killed by its pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import hypermodels
import pytest
import yaml
from helpers import LOGICAL, compose, run_module

from kdist.config import ConfigError
from kdist.runs import lock as run_lock
from kdist.tuning import fit_override
from kdist.tuning import run as run_search
from kdist.tuning.deadline import TrialTimeout, deadline
from kdist.tuning.folder import accept_search_dir
from kdist.tuning.plan import TrialPlan
from kdist.tuning.results import load_best
from kdist.tuning.search_settings import check_resume as _check_resume
from kdist.tuning.space import Space

TINY = ["trainer=fast_dev", "trainer.verbose=0", "callbacks=minimal", "tuner.verbose=0"]


def _search(run_dir: Path, overrides):
    every = [*TINY, "model=custom", "~tuner/space", *overrides]
    cfg = compose(every, config_name="tune")
    return run_search(cfg, run_dir=run_dir, overrides=[LOGICAL, *every])


def _digits(n: int = 320):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32").reshape(-1, 8, 8, 1)
    return (x[:n], y[:n]), (x[1400:1560], y[1400:1560])


# --- HyperModel.fit ---------------------------------------------------------------------------


def test_hypermodel_fit_is_detected():
    assert fit_override.overrides_fit(hypermodels.BatchSizeHyperModel)
    assert fit_override.overrides_fit(hypermodels.BatchSizeHyperModel())
    assert not fit_override.overrides_fit(hypermodels.DigitsHyperModel)
    assert not fit_override.overrides_fit(hypermodels.build_model)


def test_fit_arguments_become_config_overrides():
    overrides, other = fit_override.config_overrides(
        [{"batch_size": 8}, {"batch_size": 16, "epochs": 3, "x": None, "verbose": 0}]
    )
    assert overrides == ["trainer.global_batch_size=16", "trainer.epochs=3"]
    assert other == ["x"]
    # Epochs counted from another epoch are no `trainer.epochs`.
    overrides, _ = fit_override.config_overrides([{"epochs": 5, "initial_epoch": 2}])
    assert overrides == []


def test_what_fit_returns_feeds_the_objective_as_in_keras_tuner():
    import keras
    import keras_tuner

    objective = keras_tuner.Objective("val_loss", "min")
    history = keras.callbacks.History()
    history.history = {"loss": [3.0, 2.0, 1.0], "val_loss": [2.0, 0.5, 0.9]}
    # A History: its best epoch for the objective (keras-tuner's choice), not the last.
    assert fit_override.to_metrics(history, objective, label="f") == {
        "loss": 2.0,
        "val_loss": 0.5,
    }
    assert fit_override.to_metrics(0.25, objective, label="f") == {"val_loss": 0.25}
    assert fit_override.to_metrics({"val_loss": 1, "acc": 0.5}, objective, label="f") == {
        "val_loss": 1.0,
        "acc": 0.5,
    }
    assert fit_override.to_metrics([1.0, 3.0], objective, label="f") == {"val_loss": 2.0}
    with pytest.raises(ConfigError, match=r"^model\._target_: f returned NoneType"):
        fit_override.to_metrics(None, objective, label="f")


def test_notebook_search_trains_through_hypermodel_fit(tmp_path):
    """keras-tuner's guide: `fit` declares `batch_size`; each trial trains with it, through
    kdist, and best.yaml records it and reruns it."""
    import kdist
    import kdist.tune

    (x, y), (xv, yv) = _digits()
    tuner = kdist.tune.search(
        hypermodels.BatchSizeHyperModel(),
        x,
        y,
        validation_data=(xv, yv),
        max_trials=2,
        epochs=1,
        directory=tmp_path / "search",
        overrides=["callbacks=minimal"],
    )
    rows = tuner.result.trials
    assert [row["status"] for row in rows] == ["COMPLETED", "COMPLETED"], rows
    # The only hyperparameter is fit's: the two trials take both values.
    assert sorted(row["model.hp.batch_size"] for row in rows) == [16, 32]
    for row in rows:
        metrics = json.loads((tmp_path / "search" / row["run_dir"] / "metrics.json").read_text())
        assert metrics["global_batch_size"] == row["model.hp.batch_size"]
        assert metrics["steps"] == 320 // row["model.hp.batch_size"]  # one epoch of 320
    best = tuner.result.best
    assert best["hp"] == {"batch_size": best["hyperparameters"]["model.hp.batch_size"]}
    assert f"trainer.global_batch_size={best['hp']['batch_size']}" in best["overrides"]
    assert not any(o.startswith("++model.hp.batch_size") for o in best["overrides"])
    assert best["fit"]["hp"] == ["batch_size"]
    assert tuner.get_best_hyperparameters()[0].values["batch_size"] == best["hp"]["batch_size"]
    # The search's folder is a search's for good; best_config reads it back.
    assert run_lock.recorded_kind(tmp_path / "search") == "search"
    cfg = kdist.tune.best_config(tmp_path / "search")
    assert cfg.trainer.global_batch_size == best["hp"]["batch_size"]


def test_command_line_search_calls_the_hypermodels_fit(tmp_path):
    """`model._target_` a HyperModel class whose `fit` returns a float: the objective."""
    result = _search(
        tmp_path / "search",
        [
            "model._target_=hypermodels.FitReturnsFloat",
            "tuner.max_trials=2",
            "trainer.epochs=1",
            "objective.name=val_loss",
            "objective.direction=min",
        ],
    )
    rows = result.trials
    assert [row["status"] for row in rows] == ["COMPLETED", "COMPLETED"], rows
    for row in rows:
        assert row["objective"] == -1.0 - row["model.hp.units"]
        record = json.loads((tmp_path / "search" / row["run_dir"] / "result.json").read_text())
        assert record["fit"] == {"overrides": [], "not_config_keys": []}
        # Trained through kdist: the trial's run folder has its outputs.
        assert (tmp_path / "search" / row["run_dir"] / "metrics.json").is_file()
    assert result.best["objective"]["value"] == min(-1.0 - r["model.hp.units"] for r in rows)


def test_python_m_kdist_tune_trains_through_hypermodel_fit(tmp_path):
    """`python -m kdist.tune model._target_=<a HyperModel class with fit>`: each trial's
    batch size is fit's `hp.Choice`; best.yaml's command trains with it."""
    tests = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    search = tmp_path / "search"
    done = run_module(
        "kdist.tune",
        [
            *TINY,
            "trainer.steps_per_epoch=null",
            "trainer.epochs=1",
            "model=custom",
            "model._target_=hypermodels.BatchSizeHyperModel",
            "tuner.max_trials=2",
            f"hydra.run.dir={search}",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": path},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(p.read_text()) for p in sorted(search.glob("trials/*/result.json"))]
    assert sorted(r["hyperparameters"]["model.hp.batch_size"] for r in rows) == [16, 32]
    for record in rows:
        batch = record["hyperparameters"]["model.hp.batch_size"]
        trial = search / "trials" / f"trial_{record['trial_id']}"
        assert json.loads((trial / "metrics.json").read_text())["global_batch_size"] == batch
        assert f"trainer.global_batch_size={batch}" in record["command"]
    best = yaml.safe_load((search / "best.yaml").read_text())
    assert f"trainer.global_batch_size={best['hp']['batch_size']}" in best["command"]


@pytest.mark.parametrize(
    "target, words",
    [
        ("FitWithoutModelFit", "returned without calling model.fit"),
        ("FitRaises", "raised RuntimeError with the default hyperparameters"),
    ],
)
def test_a_fit_kdist_cannot_run_is_refused_before_the_first_trial(tmp_path, target, words):
    with pytest.raises(ConfigError) as caught:
        _search(tmp_path / "search", [f"model._target_=hypermodels.{target}", "tuner.max_trials=2"])
    text = str(caught.value)
    assert text.startswith("model._target_: ") and words in text and "\n" not in text
    assert not (tmp_path / "search" / "trials").exists()


# --- the best trial through the trust check --------------------------------------------------


def _best_yaml(folder: Path, overrides: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    content = {"trial_id": "0", "config_name": "train", "config_dir": None, "overrides": overrides}
    (folder / "best.yaml").write_text(yaml.safe_dump(content))
    return folder


def test_best_config_composes_the_best_trial(tmp_path):
    folder = _best_yaml(tmp_path / "s", ["model=mlp", "trainer.epochs=3"])
    cfg = load_best(folder, overrides=["trainer.verbose=0"])
    assert cfg.trainer.epochs == 3 and cfg.trainer.verbose == 0
    assert str(cfg.model._target_).startswith("kdist.models.")


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["model=custom", "model._target_=os.system"], "model._target_"),
        (
            ["model=custom", "model._target_=kdist.data.files.tf.io.gfile.rmtree"],
            "model._target_",
        ),
        (
            ["trainer.epochs=${oc.decode:'{_target_: os.system, _args_: [touch X]}'}"],
            "trainer.epochs",
        ),
    ],
)
def test_a_tampered_best_yaml_is_refused(tmp_path, overrides, key):
    folder = _best_yaml(tmp_path / "s", overrides)
    with pytest.raises(ConfigError) as caught:
        load_best(folder)
    text = str(caught.value)
    assert caught.value.key == key and text.startswith(key) and "\n" not in text
    assert "pass trust=True if you trust whoever wrote" in text


def test_a_users_own_model_target_is_theirs_to_exempt(tmp_path):
    folder = _best_yaml(
        tmp_path / "s", ["model=custom", "model._target_=hypermodels.build_uncompiled"]
    )
    with pytest.raises(ConfigError, match=r"^model\._target_='hypermodels.build_uncompiled': "):
        load_best(folder)
    assert load_best(folder, exempt=["model"]).model._target_ == "hypermodels.build_uncompiled"
    assert load_best(folder, trust=True).model._target_ == "hypermodels.build_uncompiled"


def test_a_missing_best_yaml_names_the_folder(tmp_path):
    with pytest.raises(ConfigError, match=r"^search_dir='.*': holds no best.yaml"):
        load_best(tmp_path)


# --- tuner.trial_timeout -----------------------------------------------------------------------


def test_deadline_interrupts_a_slow_block_and_spares_training():
    slow = pytest.raises(TrialTimeout, match=r"tuner.trial_timeout=0.2 s \(building its model\)")
    with slow, deadline(0.2):
        time.sleep(5)
    with deadline(0.2) as limit:
        with limit.training():
            time.sleep(0.4)  # not interrupted: the engine is stopped by a callback instead
        assert limit.expired()
    with deadline(None) as limit:
        assert not limit.expired()


def test_a_slow_trial_fails_with_its_reason_and_the_search_goes_on(tmp_path):
    result = _search(
        tmp_path / "search",
        [
            "model._target_=hypermodels.build_slow",
            "tuner.max_trials=2",
            "trainer.epochs=1",
            "tuner.trial_timeout=20",
        ],
    )
    by_delay = {row["model.hp.delay"]: row for row in result.trials}
    assert by_delay[0]["status"] == "COMPLETED"
    slow = by_delay[600]
    assert slow["status"] == "FAILED"
    assert slow["reason"] == "took more than tuner.trial_timeout=20 s (building its model)"
    assert float(slow["seconds"]) < 60  # not the 600 s it asked for


def test_a_slow_default_build_is_refused_naming_the_timeout(tmp_path):
    with pytest.raises(ConfigError, match=r"^tuner.trial_timeout=1.0: was exceeded building"):
        _search(
            tmp_path / "search",
            [
                "model._target_=hypermodels.build_slow",
                "++model.hp.delay=600",
                "+tuner.space.trainer.global_batch_size='choice(16,32)'",
                "tuner.trial_timeout=1",
            ],
        )


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_trial_timeout_names_the_key(value):
    from kdist.tuning.driver import check

    with pytest.raises(Exception, match="trial_timeout"):
        check(compose([f"tuner.trial_timeout={value}"], config_name="tune"))


# --- a resume given the overrides in another order ---------------------------------------------


def _plan(overrides):
    space = Space.from_config({"optimizer": {"learning_rate": "choice(0.1,0.2)"}})
    return TrialPlan(space=space, overrides=overrides)


def test_a_resume_takes_the_same_overrides_in_any_order(tmp_path):
    project = tmp_path / "keras_tuner"
    _check_resume(project, _plan(["optimizer=sgd", "trainer.epochs=2"]), "random")
    _check_resume(project, _plan(["trainer.epochs=2", "optimizer=sgd"]), "random")
    with pytest.raises(ConfigError, match="holds a search with other settings"):
        _check_resume(project, _plan(["trainer.epochs=3", "optimizer=sgd"]), "random")
    # A key set twice: the last one wins, so the order matters.
    other = tmp_path / "other"
    _check_resume(other, _plan(["trainer.epochs=2", "trainer.epochs=3"]), "random")
    with pytest.raises(ConfigError, match="holds a search with other settings"):
        _check_resume(other, _plan(["trainer.epochs=3", "trainer.epochs=2"]), "random")


# --- one owner per folder ----------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from kdist.runs import lock
    with lock.hold(sys.argv[1], kind=sys.argv[2]):
        print("held", flush=True)
        time.sleep(120)
    """
)


def _holder(run_dir: Path, kind: str) -> subprocess.Popen:
    """A process that holds `run_dir`'s lock as a search (or a training run) does."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(run_dir), kind],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # bounded: the child holds or exits within seconds
    assert line.strip() == "held", line
    return process


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()


def test_accept_search_dir_refuses_what_a_search_may_not_own(tmp_path):
    accept_search_dir(tmp_path / "new")  # a new folder
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("model: {}\n")
    with pytest.raises(
        ConfigError, match=r"^hydra.run.dir='.*': holds a training run \(.hydra/config"
    ):
        accept_search_dir(run)
    (run / "metrics.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"holds a training run \(metrics.json\)"):
        accept_search_dir(run, allow_foreign_files=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"already holds files a search does not write \(notes"):
        accept_search_dir(other)
    accept_search_dir(other, allow_foreign_files=True)


def test_a_second_search_is_refused_while_the_first_holds_the_folder(tmp_path):
    folder = tmp_path / "search"
    holder = _holder(folder, "search")
    try:
        with pytest.raises(ConfigError, match=r"^directory='.*': is in use by another kdist run"):
            accept_search_dir(folder, key="directory")
        # Nor does a training run take it, running or not.
        with pytest.raises(ConfigError, match="is in use"):
            run_lock.check_free(folder)
    finally:
        _stop(holder)
    refused = pytest.raises(ConfigError, match=r"holds a hyperparameter search \(kdist.tune\)")
    with refused, run_lock.hold(folder):
        pass
    accept_search_dir(folder)  # the same search, resumed
    # A folder a training run holds (running) is no search's either.
    training = tmp_path / "training"
    holder = _holder(training, "run")
    try:
        with pytest.raises(ConfigError, match=r"^hydra.run.dir='.*': is in use by another kdist"):
            accept_search_dir(training)
    finally:
        _stop(holder)


def test_a_notebook_search_refuses_a_training_runs_folder(tmp_path):
    import kdist.tune

    (x, y), _ = _digits(64)
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "model.keras").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"^directory='.*': holds a training run \(model.keras"):
        kdist.tune.search(hypermodels.build_model, x, y, max_trials=1, directory=trained)
    assert sorted(p.name for p in trained.iterdir()) == ["model.keras"]  # no data.npz


def _sleeping(search: Path) -> bool:
    """Whether the search's trial with `delay=600` (600 s in build_model) is running."""
    for record in search.glob("trials/*/result.json"):
        try:
            content = json.loads(record.read_text())
        except ValueError:
            continue
        if content["status"] == "RUNNING" and content["hyperparameters"]["model.hp.delay"] == 600:
            return True
    return False


def test_command_line_refuses_two_owners_for_one_folder(tmp_path):
    """A second `kdist.tune` (and a `kdist.train`) into the folder a running search holds;
    `kdist.tune` into a finished training run's folder; `kdist.train` into a finished
    search's folder: one line, status 2, nothing in the folder changed."""
    tests = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": path}
    busy = tmp_path / "busy"
    # One trial sleeps 600 s in build_model: the search holds its folder meanwhile.
    args = [
        *TINY,
        "model=custom",
        "model._target_=hypermodels.build_slow",
        "tuner.max_trials=2",
        f"hydra.run.dir={busy}",
    ]
    first = subprocess.Popen(
        [sys.executable, "-m", "kdist.tune", *args],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ends = time.monotonic() + 300
        while time.monotonic() < ends and first.poll() is None and not _sleeping(busy):
            time.sleep(0.2)
        assert first.poll() is None and _sleeping(busy), "the search did not reach its slow trial"
        held = (busy / ".lock").read_text().split()
        assert held[0] == str(first.pid) and held[-1] == "search"
        trials = {p.name: (p / "result.json").read_text() for p in (busy / "trials").iterdir()}
        second = run_module("kdist.tune", args, cwd=tmp_path, env=env, timeout=240)
        train = run_module(
            "kdist.train", [f"hydra.run.dir={busy}", *TINY[:3]], cwd=tmp_path, timeout=240
        )
        assert first.poll() is None
    finally:
        _stop(first)
    for done in (second, train):
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr[-2000:]
        assert len(lines) == 1 and f"': is in use by another kdist run (pid {first.pid}" in lines[0]
        assert lines[0].startswith("kdist: config error: hydra.run.dir=")
    # The second search ran no trial of the first's, nor touched a record.
    assert {p.name: (p / "result.json").read_text() for p in (busy / "trials").iterdir()} == trials

    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "metrics.json").write_text("{}")
    (trained / "checkpoints").mkdir()
    done = run_module("kdist.tune", [f"hydra.run.dir={trained}"], cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "': holds a training run (metrics.json, checkpoints)" in done.stderr
    assert sorted(p.name for p in trained.iterdir()) == ["checkpoints", "metrics.json"]

    search = tmp_path / "search"
    search.mkdir()
    (search / "keras_tuner").mkdir()
    (search / ".lock").write_text("search\n")  # what a finished search leaves
    done = run_module(
        "kdist.train",
        [f"hydra.run.dir={search}", "trainer.allow_foreign_files=true", *TINY[:3]],
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "holds a hyperparameter search (kdist.tune)" in done.stderr
    assert not (search / "checkpoints").exists() and not (search / ".hydra").exists()


@pytest.mark.parametrize(
    "content, kind",
    [("search\n", "search"), ("12 host search\n", "search"), ("12 search\n", None), ("", None)],
)
def test_the_lock_file_records_a_searchs_kind(tmp_path, content, kind):
    (tmp_path / ".lock").write_text(content)
    assert run_lock.recorded_kind(tmp_path) == kind
