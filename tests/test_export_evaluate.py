"""A run exports model.keras and a serving SavedModel; `kdist.evaluate` reproduces its metrics.

Cost: about 20 s fast (one `python -m kdist.evaluate` subprocess); the full
`kdist.train` + `kdist.evaluate` command-line round trip is `slow`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import REPO, compose, only_run_dir, run_module

import kdist
from kdist.config.errors import ConfigError
from kdist.config.validate import validate
from kdist.evaluation.export import load_model, load_serving
from kdist.evaluation.reopen import evaluate_run


def _printed_metrics(stdout: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(r"^validation (\w+): (\S+)$", stdout, re.M)}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A mirrored run of the CNN on digits, with its exports (outside a Hydra app)."""
    run_dir = tmp_path_factory.mktemp("export") / "run"
    cfg = compose(
        [
            "model=cnn",
            "model.filters=[8,16]",
            "model.dense_units=32",
            "strategy=mirrored",
            "trainer=fast_dev",
            "trainer.verbose=0",
            "callbacks=minimal",
            "callbacks.save_model=true",
            "callbacks.saved_model=true",
            f"run_dir={run_dir}",
        ]
    )
    kdist.Experiment(cfg).fit()
    return run_dir


def test_run_exports_model_and_saved_model(finished_run: Path):
    assert (finished_run / "model.keras").is_file()
    assert (finished_run / "saved_model" / "saved_model.pb").is_file()
    model = load_model(finished_run / "model.keras")
    x = np.random.default_rng(0).random((5, 8, 8, 1)).astype(np.float32)
    serve = load_serving(finished_run / "saved_model")
    outputs = serve(x)
    (logits,) = outputs.values()
    assert logits.shape == (5, 10)
    np.testing.assert_allclose(logits.numpy(), model(x).numpy(), atol=1e-5)
    # The plain TensorFlow way works too: a serving_default signature.
    loaded = tf.saved_model.load(str(finished_run / "saved_model"))
    assert "serving_default" in loaded.signatures


def test_evaluate_in_process_matches_metrics_json(finished_run: Path):
    recorded = json.loads((finished_run / "metrics.json").read_text())["validation"]
    metrics = evaluate_run(finished_run)
    assert set(metrics) == set(recorded) == {"loss", "accuracy"}
    for name, value in recorded.items():
        assert abs(metrics[name] - value) <= 1e-6, name
    # One device instead of the run's mirrored strategy: the same numbers.
    single = evaluate_run(finished_run, ["strategy=one_device"])
    assert abs(single["accuracy"] - recorded["accuracy"]) <= 1e-6


def test_evaluate_command_prints_the_metrics_json_values(finished_run: Path, tmp_path: Path):
    result = run_module("kdist.evaluate", [f"run_dir={finished_run}"], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = _printed_metrics(result.stdout)
    recorded = json.loads((finished_run / "metrics.json").read_text())["validation"]
    assert printed.keys() == recorded.keys()
    for name, value in recorded.items():
        assert abs(printed[name] - value) <= 1e-6, (name, printed[name], value)
    assert not (tmp_path / "outputs").exists()  # evaluating writes nothing


def test_evaluate_command_errors(tmp_path: Path):
    result = run_module("kdist.evaluate", [], cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("kdist: config error: run_dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no run config"):
        evaluate_run(tmp_path / "empty")


def _run_folder_naming(tmp_path: Path, marker: Path) -> Path:
    """A run folder whose config calls `tempfile.mkdtemp` as a metric (issue 13, item 3)."""
    from omegaconf import OmegaConf

    run_dir = tmp_path / "received"
    (run_dir / ".hydra").mkdir(parents=True)
    cfg = compose([f"run_dir={run_dir}"])
    # trainer.metrics defaults to null (accuracy); a received config spells it out.
    metrics = [
        {"_target_": "keras.metrics.SparseCategoricalAccuracy", "name": "accuracy"},
        {"_target_": "tempfile.mkdtemp", "dir": str(marker)},
    ]
    cfg.trainer.metrics = metrics
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    marker.mkdir()
    return run_dir


def test_reading_a_run_folder_runs_no_code_it_names(tmp_path: Path):
    marker = tmp_path / "marker"
    run_dir = _run_folder_naming(tmp_path, marker)
    with pytest.raises(ConfigError) as raised:
        evaluate_run(run_dir)
    message = str(raised.value)
    assert message.startswith("trainer.metrics[1]._target_='tempfile.mkdtemp': in ")
    assert "trust_run_dir=true" in message
    assert list(marker.iterdir()) == []  # nothing was called
    # The user's own override of that key is theirs to make.
    with pytest.raises(ConfigError, match=r"holds no model\.keras"):
        evaluate_run(run_dir, ["trainer.metrics=[]"])
    result = run_module("kdist.evaluate", [f"run_dir={run_dir}"], cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert len(errors) == 1 and "trainer.metrics[1]._target_" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert list(marker.iterdir()) == []


def test_the_allow_list_builds_but_does_not_write():
    from kdist.config.trust import check_trusted_targets

    # Every option kdist ships rebuilds without the trust flag (model=custom needs it).
    conf = Path(kdist.__file__).parent / "conf"
    for group in ("strategy", "model", "data", "optimizer", "callbacks"):
        for option in sorted(p.stem for p in (conf / group).glob("*.yaml")):
            if option != "custom":
                cfg = compose([f"{group}={option}"])
                check_trusted_targets(cfg, source=f"{group}={option}")
    for target in ("kdist.data.write_tfrecords", "keras.callbacks.RemoteMonitor", "os.system"):
        with pytest.raises(ConfigError, match=f"data.source._target_='{target}'"):
            check_trusted_targets({"data": {"source": {"_target_": target}}}, source="x")


def test_a_trusted_run_folder_is_rebuilt_as_written(tmp_path: Path):
    marker = tmp_path / "marker"
    run_dir = _run_folder_naming(tmp_path, marker)
    with pytest.raises(ConfigError, match=r"holds no model\.keras"):
        evaluate_run(run_dir, trust_run_dir=True)  # the check is skipped: the model is next
    result = run_module(
        "kdist.evaluate", [f"run_dir={run_dir}", "trust_run_dir=maybe"], cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2
    assert "trust_run_dir='maybe': must be true or false" in result.stderr


def test_safe_mode_cannot_be_turned_off(tmp_path: Path, monkeypatch):
    inputs = keras.Input((3,))
    outputs = keras.layers.Lambda(lambda t: t * 2.0)(inputs)
    keras.Model(inputs, outputs).save(tmp_path / "lambda.keras")
    with pytest.raises(ConfigError, match="unsafe deserialization"):
        load_model(tmp_path / "lambda.keras")
    # Not even after the process-wide switch Keras offers.
    from keras.src.backend.common import global_state

    keras.config.enable_unsafe_deserialization()
    try:
        with pytest.raises(ConfigError, match="unsafe deserialization"):
            load_model(tmp_path / "lambda.keras")
        # Keras's own check refuses it too, without kdist's scan of the config.
        monkeypatch.setattr("kdist.evaluation.export._has_python_lambda", lambda path: False)
        with pytest.raises(ConfigError, match="unsafe deserialization"):
            load_model(tmp_path / "lambda.keras")
    finally:
        global_state.set_global_attribute("safe_mode_saving", None)


def test_legacy_h5_and_other_paths_are_refused(tmp_path: Path):
    for name in ("model.h5", "model.hdf5"):
        (tmp_path / name).write_bytes(b"\x89HDF\r\n")
        with pytest.raises(ConfigError, match="legacy HDF5 full-model loading is refused"):
            load_model(tmp_path / name)
    (tmp_path / "saved").mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        load_model(tmp_path / "saved")
    with pytest.raises(ConfigError, match="no such model file"):
        load_model(tmp_path / "absent.keras")


def test_no_config_loads_models_unsafely(tmp_path: Path):
    cfg = compose(["model=custom", "model._target_=keras.models.load_model", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"model\._target_.*outside Keras safe mode"):
        validate(cfg)
    cfg = compose(
        [
            "model=custom",
            "model._target_=kdist.evaluation.export.load_model",
            "+model.path=x.keras",
            "+model.safe_mode=false",
            f"run_dir={tmp_path}",
        ]
    )
    with pytest.raises(ConfigError, match=r"model\.safe_mode=False.*cannot be turned off"):
        validate(cfg)
    extra = compose(["+callbacks.extra=[{_target_: keras.config.enable_unsafe_deserialization}]"])
    with pytest.raises(ConfigError, match=r"callbacks\.extra\[0\]\._target_"):
        validate(extra)


def test_fine_tune_from_a_saved_model(finished_run: Path, tmp_path: Path):
    cfg = compose(
        [
            "model=custom",
            "model._target_=kdist.evaluation.export.load_model",
            f"+model.path={finished_run / 'model.keras'}",
            "trainer=fast_dev",
            "trainer.verbose=0",
            "callbacks=minimal",
            f"run_dir={tmp_path}",
        ]
    )
    exp = kdist.Experiment(cfg)
    model = exp.build_model()
    original = load_model(finished_run / "model.keras")
    np.testing.assert_allclose(
        model.get_layer("logits").get_weights()[0], original.get_layer("logits").get_weights()[0]
    )
    exp.fit()
    assert int(exp.optimizer.iterations.numpy()) == 10


@pytest.mark.slow
def test_train_then_evaluate_on_the_command_line(tmp_path: Path):
    args = [
        "model=cnn",
        "model.filters=[8]",
        "strategy=mirrored",
        "runtime.logical_devices=2",
        "trainer=fast_dev",
        "trainer.verbose=0",
        "callbacks.saved_model=true",
    ]
    trained = run_module("kdist.train", args, cwd=tmp_path, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert (run_dir / "saved_model" / "saved_model.pb").is_file()
    result = run_module("kdist.evaluate", [f"run_dir={run_dir}"], cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    recorded = json.loads((run_dir / "metrics.json").read_text())["validation"]
    printed = _printed_metrics(result.stdout)
    for name, value in recorded.items():
        assert abs(printed[name] - value) <= 1e-6, name


@pytest.mark.parametrize("best", [False, True])
def test_the_default_writes_model_keras_only(tmp_path: Path, tiny, best: bool):
    # saved_model/ is opt-in (callbacks.saved_model=true), for the best model's export too.
    more = ["callbacks.best_model.monitor=val_accuracy"] if best else []
    exp = kdist.Experiment(compose([*tiny, *more]))
    exp.fit()
    assert (exp.run_dir / "model.keras").is_file()
    assert not (exp.run_dir / "saved_model").exists()
