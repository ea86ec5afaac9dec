"""Issue 38's POOR cases of this part: each a one-line refusal naming the key (or an error
that no longer happens), before training, nothing written."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compose

from kdist.config.errors import ConfigError
from kdist.config.validate import validate


def test_bfloat16_all_reduce_sums_sparse_and_integer_gradients():
    """`trainer.allreduce_dtype=bfloat16` with an embedding (`model=wide_deep
    data=categorical`): a TypeError at the first step before (no bfloat16 sparse sum)."""
    import keras
    import tensorflow as tf

    from kdist.strategies import mirrored
    from kdist.strategies.compression import compress_all_reduce

    strategy = mirrored(devices=["/cpu:0", "/cpu:1"])
    with strategy.scope():
        table = keras.Variable(np.zeros((4, 2), np.float32))
        optimizer = keras.optimizers.SGD(learning_rate=1.0)
        optimizer.build([table])
        compress_all_reduce(optimizer, "bfloat16")

    @tf.function
    def step():
        def replica_fn():
            index = tf.distribute.get_replica_context().replica_id_in_sync_group
            rows = tf.stack([index, index + 2])
            values = tf.ones((2, 2)) * tf.cast(index + 1, tf.float32)
            gradient = tf.IndexedSlices(values, rows, tf.constant([4, 2]))
            optimizer.apply_gradients([(gradient, table)])

        strategy.run(replica_fn)

    step()
    np.testing.assert_allclose(table.numpy(), -np.array([[1, 1], [2, 2], [1, 1], [2, 2]]))


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["optimizer.learning_rate=inf"], "optimizer.learning_rate=inf: must be a finite number"),
        (["optimizer.learning_rate=nan"], "optimizer.learning_rate=nan: must be a finite number"),
        (["+trainer.epoch=3"], "trainer.epoch: is not a key of trainer"),
        (["+runtime.sed=1"], "runtime.sed: is not a key of runtime"),
        (
            ["runtime.seed=99999999999999999999"],
            "runtime.seed=99999999999999999999: must be an integer from 0 to 4294967295",
        ),
        (["runtime.seed=-1"], "runtime.seed=-1: must be an integer"),
    ],
)
def test_bad_values_are_refused_before_training_naming_the_key(overrides, line):
    with pytest.raises(ConfigError) as refused:
        validate(compose(overrides))
    assert str(refused.value).startswith(line), refused.value
    assert "\n" not in str(refused.value)


def test_a_plus_typo_names_the_close_key():
    with pytest.raises(ConfigError, match=r"did you mean trainer\.epochs\?"):
        validate(compose(["+trainer.epoch=3"]))


def test_a_run_folder_inside_another_runs_folders_is_refused(tmp_path):
    from kdist.runs.layout import check_run_dir

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("a: 1\n")
    for name in ("checkpoints", "backup", "tensorboard"):
        inner = run / name / "nested"
        with pytest.raises(ConfigError) as refused:
            check_run_dir("hydra.run.dir", inner)
        assert str(refused.value).startswith(f"hydra.run.dir='{inner}': is inside the {name}/")
        assert not (run / name).exists()  # nothing written
    # A folder named checkpoints that is not a run's own is fine.
    check_run_dir("hydra.run.dir", tmp_path / "checkpoints" / "run")


def test_a_file_as_run_dir_is_one_line(tmp_path):
    from kdist.cluster.chief import writable_dir

    file = tmp_path / "passwd"
    file.write_text("root:x:0:0\n")
    with pytest.raises(ConfigError, match=r"^run_dir='.*passwd': is not a folder"):
        writable_dir(file)
    with pytest.raises(ConfigError, match=r"^run_dir='.*passwd/run': is not a folder"):
        writable_dir(file / "run")
    assert file.read_text() == "root:x:0:0\n"


@pytest.mark.parametrize(
    ("x", "problem"),
    [
        (np.zeros((0, 64), np.float32), "has no rows in 'x' (shape (0, 64)): nothing to predict"),
        (np.array([["a", "b"], ["c", "d"]]), "has features 'x' of type <U1 (not numbers)"),
    ],
)
def test_predict_input_without_rows_or_numbers_is_one_line(tmp_path, x, problem):
    from omegaconf import OmegaConf

    from kdist import predict

    path = tmp_path / "new.npz"
    np.savez(path, x=x)
    cfg = OmegaConf.create({"data": {"source": {"_target_": "kdist.data.digits"}}})
    with pytest.raises(ConfigError) as refused:
        predict._features(cfg, str(path))
    assert str(refused.value).startswith(f"input='{path}': {problem}"), refused.value


def test_a_keras_callable_refusing_a_bogus_config_is_one_line():
    from omegaconf import OmegaConf

    from kdist.config.targets import instantiate

    node = OmegaConf.create(
        {"model": {"_target_": "keras.layers.deserialize", "config": {"class_name": "Nope"}}}
    )
    with pytest.raises(ConfigError) as refused:
        instantiate(node.model)
    line = str(refused.value)
    assert line.startswith("model._target_: keras.src.layers.deserialize refused its arguments")
    assert "'Nope'" in line and "\n" not in line
    # A user's own callable failing stays an error to see whole.
    own = OmegaConf.create({"_target_": "helpers.not_a_model", "input_shape": [1], "x": 1})
    with pytest.raises(Exception) as failed:
        instantiate(own)
    assert not isinstance(failed.value, ConfigError)


def test_a_taken_port_names_tf_config_and_the_address():
    from kdist.cluster.info import ClusterInfo
    from kdist.strategies.multi_worker import _port_taken

    info = ClusterInfo(
        source="tf_config",
        cluster={"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
        task_type="worker",
        task_index=1,
    )
    line = str(_port_taken(info))
    assert line.startswith("TF_CONFIG: cluster.worker[1]='127.0.0.1:2': this task cannot listen")
    assert "address in use" in line  # what kdist.launch reads as a port race, and retries


def test_a_taken_port_in_tf_config_is_one_line_exit_2(tmp_path):
    import json
    import socket

    from helpers import REPO, free_port, run_module

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        tf_config = {
            "cluster": {"worker": [f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"]},
            "task": {"type": "worker", "index": 0},
        }
        result = run_module(
            "kdist.train",
            ["strategy=multi_worker_mirrored", f"hydra.run.dir={tmp_path / 'run'}"],
            cwd=tmp_path,
            env={"PYTHONPATH": str(REPO), "TF_CONFIG": json.dumps(tf_config)},
            timeout=300,
        )
    finally:
        taken.close()
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert len(errors) == 1 and "TF_CONFIG: cluster.worker[0]=" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("strategy", ["one_device", "auto"])
def test_a_16_bit_all_reduce_on_one_device_is_refused_alike(strategy):
    """`strategy=one_device` is refused before TensorFlow starts; `strategy=auto` that finds
    one device (this machine: no GPUs) is refused by the same rule when it is built."""
    from kdist.experiment import Experiment

    cfg = compose([f"strategy={strategy}", "trainer.allreduce_dtype=float16"])
    with pytest.raises(ConfigError) as refused:
        Experiment(cfg).build_model()
    line = str(refused.value)
    # The line starts with the key (runner_for passes a ConfigError on as it is).
    assert line.startswith("trainer.allreduce_dtype='float16': compresses the all-reduce"), line
    assert "use strategy=mirrored or multi_worker_mirrored" in line
