"""Issue 53: local SGD and DiLoCo run no cross-replica operation between two averages.

The in-process cases count the cross-replica reductions a train function traces under a
2-replica `MirroredStrategy` (its sync-on-read metric reads, gradient sums: every one goes
through `strategy.extended.reduce_to` or `batch_reduce_to`); the 2-worker case counts the
collective ops (`CollectiveReduceV2`, ...) in the graphs a `MultiWorkerMirroredStrategy`
run traced.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import LOGICAL, compose, free_port, sync_job

import kdist

JOB = [
    LOGICAL,
    "strategy=mirrored",
    "model=mlp",
    "model.units=[32]",
    *sync_job(steps_per_epoch=8, steps_per_execution=2),
]
SGD = ["optimizer=sgd", "optimizer.momentum=0.0", "optimizer.learning_rate=0.1"]


def _reductions_traced(exp: kdist.Experiment, steps: int) -> int:
    """The cross-replica reductions traced by a fresh train function's first call of
    `steps` steps (the first of an epoch: it resets the metrics too)."""
    runner = exp.runner
    extended = runner.strategy.extended
    count = [0]
    for name in ("reduce_to", "batch_reduce_to"):
        method = getattr(extended, name)

        def counted(*args, _method=method, **kwargs):
            count[0] += 1
            return _method(*args, **kwargs)

        setattr(extended, name, counted)
    try:
        runner._train_fn = runner._make_train_function()
        runner.train_loop_begin(reset_metrics=True)
        runner.train_steps(steps)
    finally:
        for name in ("reduce_to", "batch_reduce_to"):
            delattr(extended, name)
    return count[0]


@pytest.mark.parametrize("mode", ["local_sgd", "diloco"])
def test_a_local_call_traces_no_cross_replica_reduction(tmp_path: Path, mode: str):
    local = kdist.Experiment(
        compose([*JOB, f"strategy.sync.mode={mode}", "strategy.sync.sync_every=4"]),
        run_dir=tmp_path / mode,
    )
    local.fit()
    # Steps 17-18 of sync_every=4: a call between two averages.
    assert _reductions_traced(local, 2) == 0
    every = kdist.Experiment(compose(JOB), run_dir=tmp_path / "every")
    every.fit()
    # The counter sees every_step's: the gradients' sum and the metrics' reads.
    assert _reductions_traced(every, 2) > 0


def _history(tmp_path: Path, name: str, *more: str) -> dict[str, list[float]]:
    exp = kdist.Experiment(compose([*JOB, *SGD, *more]), run_dir=tmp_path / name)
    return exp.fit().history


def test_epoch_logs_are_read_across_replicas_as_every_steps(tmp_path: Path):
    # With sync_every=1 and plain SGD every replica measures the every_step weights: the
    # epoch's logs, read across replicas at its end, are every_step's.
    every = _history(tmp_path, "every")
    local = _history(
        tmp_path, "local", "strategy.sync.mode=local_sgd", "strategy.sync.sync_every=1"
    )
    assert every.keys() == local.keys()
    for key in every:
        np.testing.assert_allclose(local[key], every[key], rtol=1e-5)


def test_epoch_logs_equal_a_read_of_the_metrics_after_the_epochs_last_call(tmp_path: Path):
    import keras

    seen: list[dict[str, float]] = []

    class Read(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            # After the epoch's last call nothing trains before its logs are made (then
            # validation resets the metrics).
            if batch == 7:
                seen.append({k: float(v) for k, v in exp.runner.metric_results().items()})

    more = ["optimizer=adam", "strategy.sync.mode=local_sgd", "strategy.sync.sync_every=3"]
    exp = kdist.Experiment(compose([*JOB, *more]), run_dir=tmp_path / "r")
    history = exp.fit(callbacks=[Read()]).history
    assert len(seen) == 2
    for epoch, read in enumerate(seen):
        assert {k: history[k][epoch] for k in read} == read


def test_validation_in_calls_reads_its_metrics_across_replicas(tmp_path: Path):
    # A callback with test-batch hooks makes validation run in calls
    # (`StandardRunner._evaluate_in_calls`); they read across replicas as every_step's do.
    import keras

    class TestHooks(keras.callbacks.Callback):
        def on_test_batch_end(self, batch, logs=None):
            pass

    def validation(*more: str) -> list[float]:
        exp = kdist.Experiment(compose([*JOB, *SGD, *more]), run_dir=tmp_path / str(len(more)))
        return exp.fit(callbacks=[TestHooks()]).history["val_loss"]

    local = validation("strategy.sync.mode=local_sgd", "strategy.sync.sync_every=1")
    np.testing.assert_allclose(local, validation(), rtol=1e-5)


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@pytest.mark.slow
@pytest.mark.multiworker
@pytest.mark.parametrize("data", ["config", "arrays"])
def test_two_workers_local_calls_hold_no_collective(tmp_path: Path, data: str):
    # `arrays`: numpy arrays given to `fit`, whose passes are finite datasets (TensorFlow's
    # iterator asked every worker whether it had a batch left, an all-reduce a step).
    script = Path(__file__).with_name("local_collectives_worker.py")
    ports = ",".join(map(str, _free_ports(2)))
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(index), ports, str(tmp_path), data],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index in range(2)
    ]
    outputs = []
    try:
        for worker in workers:
            outputs.append(worker.communicate(timeout=300)[0])
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=30)
    results = []
    for worker, output in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, output[-3000:]
        line = [x for x in output.splitlines() if x.startswith("RESULT ")][-1]
        results.append(json.loads(line.removeprefix("RESULT ")))
    for result in results:
        # Calls between averages: none. The call that ends with an average reads the
        # metrics across the workers (loss and accuracy: 2 variables each).
        assert result["ops"]["local"] == {}, result["ops"]
        assert result["ops"]["exact"].get("CollectiveReduceV2", 0) > 0, result["ops"]
    first, second = results
    # Every worker shows the same batch logs (those of the last average) and epoch logs.
    assert first["batches"] == second["batches"]
    assert first["epochs"] == second["epochs"]
    batches = first["batches"]
    assert len(batches) == 8  # 2 epochs of 4 calls
    # Each epoch: its first call (before an average) shows nothing; then each call shows
    # the logs of the call that ended with the last average.
    assert batches[0] == {} and batches[4] == {}
    assert batches[2] == batches[1] != {}
    assert batches[3] != {}
