"""Parameter-server training: the strategy, `kdist.server`, the launcher's PS roles, the
wide-and-deep model on categorical data, and runs of a chief, 2 workers and 1-2 ps on
loopback ports.

Multi-process tests start their own processes, bound every wait and check by process id
that nothing is left running. Costs on a 2-core machine: the fast ones about 70 s in
all (two local clusters of 4 processes), the slow ones about 40 s each.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import REPO, SMALL_JOB, alive, compose, launch_pids

import kdist
from kdist.cluster import parse_tf_config, tf_config_for
from kdist.config import ConfigError
from kdist.config.validate import validate
from kdist.data.categorical import synthetic_categorical
from kdist.engine.ps_runner import (
    ParameterServerUnavailableError,
    savable_model,
    training_variables,
)
from kdist.evaluation.reopen import evaluate_run
from kdist.experiment.build import check_parameter_server
from kdist.launch import run
from kdist.launcher.tasks import free_ports
from kdist.launcher.tasks import plan_tasks as _plan
from kdist.models.wide_deep import FieldBuckets, wide_deep
from kdist.strategies.parameter_server import parameter_server, partitioner

DIGITS = ["strategy=parameter_server", "model=mlp", "data=digits", "trainer.verbose=2"]


def _no_cluster_env(monkeypatch) -> None:
    for name in ("TF_CONFIG", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def _cluster(workers: int = 1, ps: int = 1) -> dict[str, list[str]]:
    ports = free_ports(1 + workers + ps)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    return {
        "chief": addresses[:1],
        "worker": addresses[1 : 1 + workers],
        "ps": addresses[1 + workers :],
    }


# -- the strategy builder --------------------------------------------------------------


def test_parameter_server_needs_a_cluster(monkeypatch):
    _no_cluster_env(monkeypatch)
    with pytest.raises(ConfigError) as error:
        parameter_server()
    message = str(error.value)
    assert "parameter_server needs a cluster with worker and ps tasks" in message
    assert "python -m kdist.launch --workers N --ps M" in message


@pytest.mark.parametrize(
    ("cluster", "task", "message"),
    [
        ({"chief": ["h:1"], "worker": ["h:2"]}, "chief", "the cluster has no 'ps' task"),
        ({"chief": ["h:1"], "ps": ["h:3"]}, "chief", "the cluster has no 'worker' task"),
        (
            {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
            "worker",
            "task type 'worker' does not run the training program",
        ),
    ],
)
def test_parameter_server_checks_the_cluster(monkeypatch, cluster, task, message):
    _no_cluster_env(monkeypatch)
    monkeypatch.setenv("TF_CONFIG", tf_config_for(cluster, task, 0))
    with pytest.raises(ConfigError, match=re.escape(message)):
        parameter_server()


def test_a_slurm_step_needs_tf_config_for_roles(monkeypatch):
    _no_cluster_env(monkeypatch)
    slurm = {
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_STEP_NODELIST": "node[1-3]",
        "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
    }
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as error:
        parameter_server(cluster="slurm")
    assert error.value.key == "strategy.cluster"
    assert "recipes/cluster/slurm-ps.sbatch" in str(error.value)


def test_steps_per_schedule_is_checked_first(monkeypatch):
    _no_cluster_env(monkeypatch)
    for bad in (0, -3, True):
        with pytest.raises(ConfigError, match=r"strategy\.steps_per_schedule"):
            parameter_server(steps_per_schedule=bad)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("runtime.jit_compile=true", r"runtime\.jit_compile=True: cannot work under"),
        ("data.shard_policy=file", r"data\.shard_policy='file': cannot divide the data"),
        ("data.shard_policy=data", r"data\.shard_policy='data': cannot divide the data"),
        ("runtime.intra_op_threads=1", r"runtime\.intra_op_threads=1: cannot be applied under"),
        ("runtime.inter_op_threads=2", r"runtime\.inter_op_threads=2: cannot be applied under"),
    ],
)
def test_what_a_parameter_server_cannot_honour_is_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        check_parameter_server(compose([*DIGITS, override]))


@pytest.mark.parametrize("policy", ["auto", "off"])
def test_shard_policies_a_parameter_server_honours_pass(policy: str):
    check_parameter_server(compose([*DIGITS, f"data.shard_policy={policy}"]))


def test_partitioners_shard_the_first_axis():
    table = tf.TensorShape([20_000, 16])  # 1.28 MB of float32
    small = tf.TensorShape([100, 4])
    minimum = partitioner(min_shard_bytes=65_536, num_ps=2)
    assert isinstance(minimum, tf.distribute.experimental.partitioners.MinSizePartitioner)
    assert minimum(table, tf.float32) == [2, 1]
    assert minimum(small, tf.float32) == [1, 1]  # below one shard's minimum: not split
    maximum = partitioner(max_shard_bytes=400_000, num_ps=2)
    assert isinstance(maximum, tf.distribute.experimental.partitioners.MaxSizePartitioner)
    assert maximum(table, tf.float32) == [2, 1]  # capped at the number of ps
    assert partitioner(max_shard_bytes=400_000, max_shards=8, num_ps=2)(table, tf.float32) == [4, 1]
    assert partitioner(num_ps=2) is None


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"min_shard_bytes": 1024, "max_shard_bytes": 2048}, "strategy.max_shard_bytes"),
        ({"max_shards": 2}, "strategy.max_shards"),
        ({"min_shard_bytes": 0}, "strategy.min_shard_bytes"),
        ({"max_shard_bytes": -1}, "strategy.max_shard_bytes"),
        ({"min_shard_bytes": 1024, "max_shards": 0}, "strategy.max_shards"),
    ],
)
def test_partitioner_keys_are_checked(kwargs, key):
    with pytest.raises(ConfigError) as error:
        partitioner(num_ps=2, **kwargs)
    assert error.value.key == key


def test_configs_compose_and_validate():
    cfg = compose(
        [
            "strategy=parameter_server",
            "model=wide_deep",
            "data=categorical",
            "strategy.max_shards=2",
        ]
    )
    validate(cfg)
    assert cfg.strategy._target_ == "kdist.strategies.parameter_server"
    assert cfg.strategy.steps_per_schedule == 8 and cfg.strategy.min_shard_bytes is None
    recipe = compose(config_name="ps_embedding", config_dir=REPO / "recipes")
    validate(recipe)
    assert recipe.strategy.min_shard_bytes == 65536
    assert recipe.model._target_ == "kdist.models.wide_deep"
    assert recipe.data.source._target_ == "kdist.data.categorical.synthetic_categorical"
    # The schema types every key: a wrong type fails while Hydra composes.
    with pytest.raises(Exception, match=r"strategy\.steps_per_schedule=many"):
        compose(["strategy=parameter_server", "strategy.steps_per_schedule=many"])


# -- the model and the data ------------------------------------------------------------


def test_categorical_source_is_learnable_and_seeded():
    source = synthetic_categorical(num_train=600, num_validation=200, num_fields=5, vocab_size=50)
    x, y = source.arrays("train")
    assert x.shape == (600, 5) and x.dtype == np.int32 and source.input_shape == (5,)
    assert x.min() >= 0 and x.max() < 50 and set(np.unique(y)) == {0, 1}
    again = synthetic_categorical(num_train=600, num_validation=200, num_fields=5, vocab_size=50)
    assert np.array_equal(again.arrays("train")[0], x)
    # Power-law frequencies: the most frequent id of a field is far above the uniform share.
    counts = np.bincount(x[:, 0], minlength=50)
    assert counts.max() > 4 * 600 / 50
    flat = synthetic_categorical(num_train=600, num_validation=0, vocab_size=50, skew=0.0)
    assert np.bincount(flat.arrays("train")[0][:, 0], minlength=50).max() < 3 * 600 / 50
    for bad in ({"num_classes": 1}, {"skew": -1.0}, {"vocab_size": 0}, {"num_train": 0}):
        with pytest.raises(ValueError):
            synthetic_categorical(**bad)


def test_wide_deep_builds_buckets_per_field_and_round_trips(tmp_path: Path):
    model = wide_deep(input_shape=(3,), num_classes=4, num_buckets=50, embedding_dim=4, units=[8])
    ids = np.array([[7, 7, 7], [1, 2, 3]], dtype=np.int32)
    assert model(ids).shape == (2, 4)
    buckets = FieldBuckets(50)(ids).numpy()
    assert len(set(buckets[0])) == 3  # the same id in three fields: three rows
    assert buckets.max() < 50
    names = {v.path for v in model.trainable_variables}
    assert {"wide_embedding/embeddings", "deep_embedding/embeddings"} <= names
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(loaded(ids), model(ids), rtol=1e-6)
    with pytest.raises(ValueError, match="num_fields"):
        wide_deep(input_shape=(8, 8, 1), num_classes=10)


def test_wide_deep_learns_categorical_data_on_one_device(tmp_path: Path):
    cfg = compose(
        [
            "model=wide_deep",
            "data=categorical",
            "data.source.num_train=6000",
            "data.source.num_validation=1000",
            "trainer.epochs=4",
            "trainer.global_batch_size=128",
            "trainer.verbose=0",
            "callbacks=minimal",
            f"run_dir={tmp_path}",
        ]
    )
    exp = kdist.Experiment(cfg)
    exp.fit()
    assert exp.metrics()["validation"]["accuracy"] > 0.75
    # Without sharding the optimizer sees the model's own variables and saving needs no copy.
    assert training_variables(exp.model) == exp.model.trainable_variables
    assert savable_model(exp.model) is exp.model


def test_unavailable_error_names_the_task():
    error = ParameterServerUnavailableError(task=1, address="10.0.0.3:2222", detail="gone")
    assert str(error) == "parameter server ps 1 (10.0.0.3:2222) is unreachable: gone"
    assert str(ParameterServerUnavailableError(task=None, address=None, detail="x")).startswith(
        "a parameter server is unreachable"
    )


# -- kdist.server and the launcher's plan ----------------------------------------------


def _server_env(tf_config: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "SLURM_"))}
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return env


def test_server_refuses_tasks_it_does_not_serve(tmp_path: Path):
    cluster = _cluster()
    for tf_config, message in [
        (None, "kdist: config error: TF_CONFIG: is not set: kdist.server runs one task"),
        (tf_config_for(cluster, "chief", 0), "task type 'chief' does not run kdist.server"),
        ('{"cluster": {"ps": ["h:1"]}, "task": {"type": "ps", "index": 3}}', "out of range"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "kdist.server"],
            env=_server_env(tf_config),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


@pytest.mark.multiworker
def test_server_serves_until_sigterm(tmp_path: Path):
    cluster = _cluster()
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "kdist.server"],
        env=_server_env(tf_config_for(cluster, "ps", 0)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 120
        lines = []
        for line in server.stdout:
            lines.append(line)
            if "serving on" in line:
                break
            assert time.monotonic() < deadline, "the server did not start in time"
        assert f"ps 0 serving on {cluster['ps'][0]}" in "".join(lines)
        host, port = cluster["ps"][0].split(":")
        import socket

        with socket.create_connection((host, int(port)), timeout=5):
            pass
        server.send_signal(signal.SIGTERM)
        rest, _ = server.communicate(timeout=30)
        assert server.returncode == 0
        assert "ps 0 stopping" in rest
        # The no-driver ERROR line of CUDA-less machines is filtered out.
        assert "failed call to cuInit" not in "".join(lines) + rest
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


def test_launch_plans_a_chief_and_servers(tmp_path: Path):
    tasks = _plan(
        workers=2,
        ps=2,
        module="kdist.train",
        overrides=["strategy=parameter_server"],
        host="127.0.0.1",
        run_dir=tmp_path / "run",
        base_env={},
    )
    assert [t.name for t in tasks] == ["ps 0", "ps 1", "worker 0", "worker 1", "chief 0"]
    infos = [parse_tf_config(t.env["TF_CONFIG"]) for t in tasks]
    assert len({json.dumps(dict(i.cluster), sort_keys=True) for i in infos}) == 1
    assert {job: len(a) for job, a in infos[0].cluster.items()} == {
        "chief": 1,
        "worker": 2,
        "ps": 2,
    }
    for task, info in zip(tasks, infos, strict=True):
        assert (info.task_type, info.task_index) == (task.role, task.index)
        if task.role == "chief":
            assert task.trains and task.command[-2:] == [
                "strategy=parameter_server",
                f"hydra.run.dir={tmp_path / 'run'}",
            ]
        else:
            assert not task.trains and task.command[-2:] == ["-m", "kdist.server"]


# -- local clusters --------------------------------------------------------------------


@pytest.mark.multiworker
def test_digits_on_two_workers_and_one_ps(tmp_path: Path):
    log = io.StringIO()
    run_dir = tmp_path / "run"
    job = [*DIGITS, "trainer.epochs=10", "callbacks.saved_model=true"]
    code = run(2, job, ps=1, run_dir=run_dir, timeout=300, output=log)
    text = log.getvalue()
    assert code == 0, text[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["validation"]["accuracy"] >= 0.90, metrics
    assert metrics["strategy"] == "ParameterServerStrategyV2"
    # optimizer.iterations: every scheduled step applied exactly once (no lost counts).
    assert metrics["steps"] == 10 * 22
    names = {p.name for p in run_dir.iterdir()}
    expected = {"metrics.json", "model.keras", "saved_model", "history.csv", "train.log"}
    assert expected | {".hydra", "tensorboard", "curves.png", "checkpoints"} <= names
    assert (run_dir / "checkpoints" / "checkpoint").is_file()
    assert re.search(r"\[chief 0\] validation accuracy: 0\.9\d+", text)
    # The progress bar (one line per epoch at verbose=2) follows the scheduled steps.
    epochs = r"\[chief 0\] Epoch \d+/10 - 22/22 steps - .* steps/s, .* val_accuracy"
    assert len(re.findall(epochs, text)) == 10
    assert "[launch] every task finished" in text
    assert not any(alive(pid) for pid in launch_pids(text).values())
    # The exported model, evaluated on one device here, gives the run's metrics.
    evaluated = evaluate_run(run_dir, ["strategy=one_device"])
    assert set(evaluated) == set(metrics["validation"]) == {"loss", "accuracy"}
    for name, value in metrics["validation"].items():
        assert abs(evaluated[name] - value) <= 1e-6, (name, evaluated[name], value)


@pytest.mark.multiworker
def test_a_backup_holds_every_step_it_is_numbered_by(tmp_path: Path):
    # Steps of 30-40 ms on the workers and a backup every 5 steps: when the chief saves,
    # functions it scheduled are still running. The save waits for them
    # (`Runner.settle`); otherwise the backup of step S holds fewer than S steps, and a
    # run resumed from it would end short (389 of 390 steps in a restarted cluster).
    log = io.StringIO()
    run_dir = tmp_path / "run"
    overrides = [
        "strategy=parameter_server",
        "model=cnn",
        "data=synthetic",
        "data.source.num_train=2048",
        "data.source.num_validation=128",
        "trainer.epochs=2",
        "trainer.steps_per_epoch=16",
        "trainer.global_batch_size=128",
        "trainer.verbose=0",
        "callbacks.backup.every_n_steps=5",
        "callbacks.backup.keep=10",
    ]
    code = run(2, overrides, ps=1, run_dir=run_dir, timeout=300, output=log)
    assert code == 0, log.getvalue()[-3000:]
    saved = {}
    for index in sorted((run_dir / "backup").glob("ckpt-*.index")):
        reader = tf.train.load_checkpoint(str(index.with_suffix("")))
        iterations = reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")
        saved[int(index.stem.split("-")[1])] = int(iterations)
    assert sorted(saved) == [5, 10, 15, 20, 25, 30, 32], saved
    assert all(step == iterations for step, iterations in saved.items()), saved


@pytest.mark.multiworker
def test_nan_stops_the_cluster_with_status_3_and_the_backup_stays_finite(
    tmp_path: Path, monkeypatch
):
    # Steps run asynchronously on the workers: the NaN shows in the logged loss or, when a
    # backup comes first, in the weights it checks. Either stops the chief with status 3,
    # the launcher stops every task, and the newest backup predates the poisoned weights.
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests"))
    log = io.StringIO()
    run_dir = tmp_path / "run"
    overrides = [*DIGITS, "trainer.epochs=3", "callbacks.backup.every_n_steps=5"]
    code = run(
        2,
        [*overrides, "callbacks.extra=[{_target_: helpers.InjectNaN, step: 30}]"],
        ps=1,
        run_dir=run_dir,
        timeout=300,
        output=log,
    )
    text = log.getvalue()
    assert code == 3, text[-3000:]
    stopped = re.search(
        r"\[chief 0\] kdist: error: (training loss is nan|the weights are not finite) "
        r"after step (\d+)",
        text,
    )
    assert stopped, text[-3000:]
    assert "[launch] chief 0 exited with status 3; stopped every task" in text
    assert not any(alive(pid) for pid in launch_pids(text).values())
    backups = sorted(
        int(p.name.split("-")[1].split(".")[0]) for p in run_dir.glob("backup/*.index")
    )
    assert backups and max(backups) < int(stopped.group(2)), (backups, stopped.group(0))
    check = kdist.Experiment(
        compose([o for o in overrides if not o.startswith("strategy=")]), run_dir=run_dir
    )
    check.build_model()
    assert check.restore() == max(backups)
    assert all(np.all(np.isfinite(np.asarray(w))) for w in check.model.get_weights())


@pytest.mark.multiworker
def test_xla_under_a_parameter_server_is_a_config_error_naming_the_key(tmp_path: Path):
    log = io.StringIO()
    code = run(
        2,
        ["strategy=parameter_server", *SMALL_JOB, "runtime.jit_compile=true"],
        ps=1,
        run_dir=tmp_path / "run",
        timeout=300,
        output=log,
    )
    text = log.getvalue()
    assert code == 2, text[-3000:]
    assert (
        "[chief 0] kdist: config error: runtime.jit_compile=True: cannot work under "
        "parameter_server" in text
    )
    assert "[launch] chief 0 exited with status 2; stopped every task" in text
    assert not any(alive(pid) for pid in launch_pids(text).values())


@pytest.mark.multiworker
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_under_a_parameter_server(tmp_path: Path, precision: str):
    log = io.StringIO()
    run_dir = tmp_path / "run"
    code = run(
        2,
        [
            "strategy=parameter_server",
            *SMALL_JOB,
            f"runtime.mixed_precision={precision}",
            "callbacks.save_model=true",
        ],
        ps=1,
        run_dir=run_dir,
        timeout=300,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 6
    assert np.isfinite(metrics["train"]["loss"]) and np.isfinite(metrics["validation"]["loss"])
    # The exported model computes in the policy's dtype and keeps float32 variables.
    model = keras.models.load_model(run_dir / "model.keras")
    compute = "float16" if precision == "mixed_float16" else "bfloat16"
    assert model.get_layer("dense_0").compute_dtype == compute
    assert all(v.dtype == "float32" for v in model.trainable_variables)


@pytest.mark.slow
@pytest.mark.multiworker
def test_a_truncated_newest_backup_resumes_the_cluster_from_the_previous(tmp_path: Path):
    run_dir = tmp_path / "run"
    job = [
        *DIGITS,
        "trainer.steps_per_epoch=12",
        "trainer.steps_per_execution=1",
        "strategy.steps_per_schedule=1",
        "callbacks.backup.every_n_steps=5",
    ]
    log = io.StringIO()
    code = run(2, [*job, "trainer.epochs=1"], ps=1, run_dir=run_dir, timeout=300, output=log)
    assert code == 0, log.getvalue()[-3000:]
    shards = sorted((run_dir / "backup").glob("ckpt-12.data-*"))
    assert shards
    for shard in shards:
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    log = io.StringIO()
    code = run(2, [*job, "trainer.epochs=2"], ps=1, run_dir=run_dir, timeout=300, output=log)
    text = log.getvalue()
    assert code == 0, text[-3000:]
    assert re.search(r"\[chief 0\] .*ckpt-12 cannot be restored", text), text[-3000:]
    assert re.search(r"\[chief 0\] .*continuing at step 10 ", text), text[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 24


def _launch(tmp_path: Path, overrides: list[str], *, ps: int = 1) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "kdist.launch",
        "--workers",
        "2",
        "--ps",
        str(ps),
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        *overrides,
    ]
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _read_until(launcher: subprocess.Popen, marker: str, seconds: float = 240) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    assert launcher.stdout is not None
    for line in launcher.stdout:
        seen.append(line)
        if marker in line:
            return seen
        assert time.monotonic() < deadline, f"{marker!r} did not appear in time"
    raise AssertionError(f"{marker!r} never appeared:\n{''.join(seen)[-3000:]}")


@pytest.mark.multiworker
def test_killing_the_ps_stops_the_chief_with_a_clear_error(tmp_path: Path):
    launcher = _launch(tmp_path, [*DIGITS, "trainer.epochs=200"])
    try:
        seen = _read_until(launcher, "[chief 0] Epoch 3/")
        pids = launch_pids("".join(seen))
        os.kill(pids["ps 0"], signal.SIGKILL)
        killed_at = time.monotonic()
        rest, _ = launcher.communicate(timeout=120)
        elapsed = time.monotonic() - killed_at
        text = "".join(seen) + rest
        assert launcher.returncode != 0
        assert elapsed < 60, elapsed
        assert "[launch] ps 0 exited with status 137" in text
        assert "[launch] chief 0 exited with status 5" in text, text[-3000:]
        assert "[chief 0] kdist: error: parameter server ps 0" in text
        line = re.search(r"parameter server ps 0 \(127\.0\.0\.1:\d+\) is unreachable: \S+", text)
        assert line, text[-3000:]
        assert not any(alive(pid) for pid in pids.values())
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
    # The checkpoints written before the failure are intact and readable.
    latest = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    assert latest is not None
    reader = tf.train.load_checkpoint(latest)
    shapes = reader.get_variable_to_shape_map()
    assert reader.get_tensor("state/steps/.ATTRIBUTES/VARIABLE_VALUE") >= 22
    assert any(name.startswith("optimizer/_trainable_variables/") for name in shapes)
    for name in shapes:
        reader.get_tensor(name)


@pytest.mark.slow
@pytest.mark.multiworker
def test_killing_a_worker_keeps_training(tmp_path: Path):
    epochs = 10
    launcher = _launch(tmp_path, [*DIGITS, f"trainer.epochs={epochs}"])
    try:
        seen = _read_until(launcher, "[chief 0] Epoch 3/")
        pids = launch_pids("".join(seen))
        os.kill(pids["worker 1"], signal.SIGKILL)
        rest, _ = launcher.communicate(timeout=300)
        text = "".join(seen) + rest
        assert launcher.returncode == 0, text[-3000:]
        assert "[launch] worker 1 exited with status 137; training goes on with 1 worker(s)" in text
        assert "[launch] every task finished" in text
        assert not any(alive(pid) for pid in pids.values())
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # Closures of the dead worker ran again on the other one: at least every planned
    # step was applied (a step that ran partly before the kill may count twice).
    assert metrics["steps"] >= epochs * 22
    assert metrics["validation"]["accuracy"] >= 0.90


@pytest.mark.slow
@pytest.mark.multiworker
def test_losing_every_worker_stops_the_run(tmp_path: Path):
    launcher = _launch(tmp_path, [*DIGITS, "trainer.epochs=200"])
    try:
        seen = _read_until(launcher, "[chief 0] Epoch 2/")
        pids = launch_pids("".join(seen))
        os.kill(pids["worker 0"], signal.SIGKILL)
        os.kill(pids["worker 1"], signal.SIGKILL)
        rest, _ = launcher.communicate(timeout=120)
        text = "".join(seen) + rest
        assert launcher.returncode == 137, text[-3000:]
        assert "[launch] no worker is left" in text
        assert not any(alive(pid) for pid in pids.values())
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)


PROBE = """
import json, sys
import kdist
from tensorflow.python.distribute.sharded_variable import ShardedVariable

run_dir = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("hydra.run.dir="))
cfg = kdist.compose(["trainer.verbose=0"], config_name="ps_embedding", config_dir=sys.argv[1])
exp = kdist.Experiment(cfg, run_dir=run_dir)
model = exp.build_model()
shards = {}
for layer in ("wide_embedding", "deep_embedding"):
    value = model.get_layer(layer).embeddings.value
    assert isinstance(value, ShardedVariable), type(value)
    shards[layer] = [[v.device, list(v.shape)] for v in value.variables]
exp.fit()
print("PROBE " + json.dumps({"shards": shards, "metrics": exp.metrics()}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.multiworker
def test_embedding_recipe_shards_its_tables_over_two_ps(tmp_path: Path, monkeypatch):
    (tmp_path / "ps_probe.py").write_text(PROBE)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    log = io.StringIO()
    code = run(
        2,
        [str(REPO / "recipes")],
        ps=2,
        module="ps_probe",
        run_dir=tmp_path / "run",
        timeout=600,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    found = re.search(r"\[chief 0\] PROBE (.*)", text)
    assert found, text[-3000:]
    probe = json.loads(found.group(1))
    for layer, rows in (("wide_embedding", 20_000), ("deep_embedding", 20_000)):
        shards = probe["shards"][layer]
        assert [spec for spec, _ in shards] == [
            "/job:ps/replica:0/task:0/device:CPU:0",
            "/job:ps/replica:0/task:1/device:CPU:0",
        ]
        assert sum(shape[0] for _, shape in shards) == rows
    metrics = probe["metrics"]
    assert metrics["steps"] == 5 * 78
    assert metrics["validation"]["accuracy"] >= 0.8
    assert (tmp_path / "run" / "model.keras").is_file()
    assert not any(alive(pid) for pid in launch_pids(text).values())


@pytest.mark.slow
@pytest.mark.multiworker
def test_a_restarted_cluster_resumes_sharded_training_from_the_backup(tmp_path: Path):
    command = [
        sys.executable,
        "-m",
        "kdist.launch",
        "--workers",
        "2",
        "--ps",
        "2",
        "--max-restarts",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        "-cd",
        str(REPO / "recipes"),
        "-cn",
        "ps_embedding",
        "trainer.verbose=2",
        "callbacks.backup.every_n_steps=32",
    ]
    launcher = subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        seen = _read_until(launcher, "[chief 0] Epoch 3/")
        first = launch_pids("".join(seen))
        os.kill(first["chief 0"], signal.SIGKILL)
        rest, _ = launcher.communicate(timeout=600)
        text = "".join(seen) + rest
        assert launcher.returncode == 0, text[-3000:]
        assert "[launch] restart 1 of 1" in text
        assert re.search(r"resuming from \S+/backup/ckpt-\d+", text), text[-3000:]
        assert not any(alive(pid) for pid in first.values())
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 5 * 78
    assert metrics["validation"]["accuracy"] >= 0.8
