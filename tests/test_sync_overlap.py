"""strategy.sync.overlap_steps: an average's all-reduce beside the next local steps (issue 53).

An average sent at step s is applied at step s + k: each replica then takes the average
plus what it learnt since it sent. These cases check that the steps run while the
all-reduce is in flight, that the result does not depend on the thread's speed, that
local SGD's average keeps the replicas' mean, that every epoch still ends with the
replicas equal, and that a save with an average in flight resumes exactly.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import compose, crash_at_step
from test_local_sgd import JOB, MLP, _fit, _local, _max_diff, _replica_spread, _weights

import kdist
from kdist.engine.sync import averaging

ADAM = ["optimizer=adam", "optimizer.learning_rate=0.01"]


def _overlapped(mode: str = "diloco", every: int = 4, overlap: int = 2) -> list[str]:
    return _local(mode, every, f"strategy.sync.overlap_steps={overlap}")


def _copies(exp: kdist.Experiment) -> list[list[np.ndarray]]:
    """Each replica's copy of every trainable weight."""
    return [[np.asarray(c) for c in v.value.values] for v in exp.model.trainable_variables]


def test_the_local_steps_run_while_the_average_is_in_flight(tmp_path: Path, monkeypatch):
    # The all-reduce's thread waits until the training thread has finished the step
    # after the one it was sent at: were the training thread waiting for the average,
    # the event would never come (a bounded wait, then the run fails). The average sent
    # at an epoch's last step is applied at once, the epoch's average.
    sent_at: list[int] = []
    stepped = threading.Event()
    run = averaging._Flight._run

    def after_the_next_step(self, function):
        if sent_at[-1] % 12:
            if not stepped.wait(timeout=120):
                raise TimeoutError("the training thread took no step beside the all-reduce")
            stepped.clear()
        run(self, function)

    monkeypatch.setattr(averaging._Flight, "_run", after_the_next_step)
    launch = averaging.WeightAverager.launch

    def record(self, step):
        sent_at.append(step)
        launch(self, step)

    monkeypatch.setattr(averaging.WeightAverager, "launch", record)
    exp = kdist.Experiment(compose([*JOB, *MLP, *ADAM, *_overlapped()]), run_dir=tmp_path)

    class Signal(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if sent_at and int(exp.optimizer.iterations.numpy()) == sent_at[-1] + 1:
                stepped.set()

    exp.fit(callbacks=[Signal()])
    # Sent at 4 and 8 of each 12-step epoch; the one sent at 12 ends the epoch.
    assert sent_at == [4, 8, 12, 16, 20, 24]


@pytest.mark.slow
def test_an_overlapped_average_lands_at_its_step_whatever_the_threads_speed(
    tmp_path: Path, monkeypatch
):
    quick = _fit(tmp_path, "quick", *_overlapped(), *ADAM)
    run = averaging._Flight._run

    def slow(self, function):
        threading.Event().wait(0.3)
        run(self, function)

    monkeypatch.setattr(averaging._Flight, "_run", slow)
    slowed = _fit(tmp_path, "slow", *_overlapped(), *ADAM)
    assert _max_diff(_weights(quick), _weights(slowed)) == 0.0
    assert quick.runner.averager.count.syncs == slowed.runner.averager.count.syncs == 6
    # It is not the average sent at once: the steps in flight are kept, not averaged.
    blocking = _fit(tmp_path, "blocking", *_local("diloco", 4), *ADAM)
    assert _max_diff(_weights(quick), _weights(blocking)) > 0


def test_local_sgds_overlapped_average_keeps_the_replicas_mean(tmp_path: Path):
    exp = _fit(tmp_path, "local", *_overlapped("local_sgd"), *ADAM)
    runner = exp.runner
    runner.train_loop_begin(reset_metrics=True)
    runner.train_steps(4)  # to step 28: sent
    runner.train_steps(1)  # step 29: in flight, lands at 30
    assert runner.averager.in_flight
    before = _copies(exp)
    runner.averager.land()
    runner._land_at = None
    after = _copies(exp)
    for own_before, own_after in zip(before, after, strict=True):
        assert float(np.max(np.abs(own_before[0] - own_before[1]))) > 0
        # The replicas' mean is unchanged: local SGD's average is the mean of what they
        # sent, and each keeps what it learnt since. The average is taken as `anchor +
        # mean(sent - anchor)`, which rounds apart from `mean(sent)` by float32 ulps of
        # the weights (below 1e-6 here, |w| < 2).
        np.testing.assert_allclose(np.mean(own_after, 0), np.mean(own_before, 0), atol=1e-6)
        # ... and they still differ by what each learnt since it sent.
        assert float(np.max(np.abs(own_after[0] - own_after[1]))) > 0


def test_every_epoch_ends_with_the_replicas_equal(tmp_path: Path):
    spreads: dict[str, list[float]] = {"batch": [], "epoch": []}
    exp = kdist.Experiment(compose([*JOB, *MLP, *ADAM, *_overlapped()]), run_dir=tmp_path)

    class Spread(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 6:  # step 7: the average of step 4 landed at 6, plus a step
                spreads["batch"].append(_replica_spread(exp))

        def on_epoch_end(self, epoch, logs=None):
            spreads["epoch"].append(_replica_spread(exp))

    exp.fit(callbacks=[Spread()])
    assert spreads["epoch"] == [0.0, 0.0]
    assert all(spread > 0 for spread in spreads["batch"])
    assert not exp.runner.averager.in_flight


def test_a_crash_with_an_average_in_flight_resumes_exactly(tmp_path: Path):
    # Averages sent at 8 and applied at 11 (sync_every=4, overlap_steps=3); the backup of
    # step 10 holds the average in flight, what each replica sent and its own weights.
    job = [
        *ADAM,
        *_overlapped("diloco", 4, 3),
        "callbacks.backup.enabled=true",
        "callbacks.backup.every_n_steps=5",
    ]
    whole = _fit(tmp_path, "whole", *job)
    run = tmp_path / "run"
    config = compose([*JOB, *MLP, *job])
    crash_at_step(kdist.Experiment(config, run_dir=run), 12)
    reader = tf.train.load_checkpoint(str(run / "backup" / "ckpt-10"))
    pending = [
        k
        for k in reader.get_variable_to_shape_map()
        if k.endswith("pending_at/.ATTRIBUTES/VARIABLE_VALUE")
    ]
    assert [int(reader.get_tensor(k)) for k in pending] == [8]
    resumed = kdist.Experiment(config, run_dir=run)
    resumed.fit()
    assert int(resumed.optimizer.iterations.numpy()) == 24
    assert _replica_spread(resumed) == 0.0
    assert _max_diff(_weights(whole), _weights(resumed)) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize(("first", "then"), [(3, 0), (0, 2)])
def test_a_resume_may_turn_the_overlap_on_or_off(tmp_path: Path, caplog, first: int, then: int):
    saves = ["callbacks.backup.enabled=true", "callbacks.backup.every_n_steps=5"]
    run = tmp_path / "run"
    job = [*JOB, *MLP, *ADAM, *saves]
    crashed = kdist.Experiment(compose([*job, *_overlapped("diloco", 4, first)]), run_dir=run)
    crash_at_step(crashed, 12)
    resumed = kdist.Experiment(compose([*job, *_overlapped("diloco", 4, then)]), run_dir=run)
    with caplog.at_level("INFO", logger="kdist"):
        history = resumed.fit()
    assert int(resumed.optimizer.iterations.numpy()) == 24
    assert _replica_spread(resumed) == 0.0
    assert np.isfinite(history.history["loss"]).all()
    # Turned on: the checkpoint holds no overlapped state, the averages start anew.
    anew = "averaging anew" in caplog.text
    assert anew == (then > 0), caplog.text[-2000:]


@pytest.mark.slow
@pytest.mark.multiworker
def test_two_workers_average_beside_their_steps_and_end_each_epoch_equal(tmp_path: Path):
    # Under MultiWorkerMirroredStrategy the all-reduce runs on its own thread while each
    # worker's train calls run (they hold no collective between averages).
    from test_local_sgd import _cluster_run

    text, run_dir = _cluster_run(tmp_path, "overlap", *_overlapped("diloco", 4, 2), *ADAM)
    # Validation runs on the epoch's average: both workers measure the same model.
    finals = re.findall(r"\[(worker \d)\] .*validation: (loss [\d.]+, accuracy [\d.]+)", text)
    assert {w for w, _ in finals} == {"worker 0", "worker 1"}
    assert len({m for _, m in finals}) == 1, finals
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["num_replicas"] == 2 and metrics["steps"] == 12
