"""Checkpoints and fault tolerance: step-exact resume, integrity, NaN guard, best model.

"Nothing lost" below means: optimizer.iterations equals the planned steps, no batch is
repeated or skipped (the data position test, and equal weights), and the final weights
equal an uninterrupted run.
"""

from __future__ import annotations

import csv
import gc
import json
import logging
import os
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import REPO, compose, crash_at_step, run_module
from omegaconf import OmegaConf

import kdist
from kdist.callbacks.guards import NonFiniteLossError
from kdist.data import ArraySource, make_dataset_fn
from kdist.engine.checkpoint import PeriodicCheckpoint
from kdist.engine.checkpoint import writer as writer_module
from kdist.engine.state import CheckpointError, restore_latest

BASE = [
    "trainer.epochs=3",
    "trainer.steps_per_epoch=12",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=1",
    "trainer.verbose=0",
    "callbacks.backup.every_n_steps=5",
    "callbacks.backup.keep=3",
]


def _weights(model) -> list[np.ndarray]:
    return [np.asarray(w) for w in model.get_weights()]


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def _backup_steps(run_dir: Path) -> list[int]:
    return _backup_steps_in(run_dir / "backup")


def _backup_steps_in(folder: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1].split(".")[0]) for p in folder.glob("*.index"))


# -- the data position -------------------------------------------------------------------


class _Indexed:
    data = OmegaConf.create(
        {"shuffle": True, "shuffle_buffer": 50, "cache": True, "shard_policy": "auto"}
    )

    @staticmethod
    def source(n: int = 100) -> ArraySource:
        x = np.arange(n, dtype=np.float32).reshape(n, 1)
        return ArraySource(
            x_train=x,
            y_train=np.zeros(n),
            x_validation=x[:4],
            y_validation=np.zeros(4),
            num_classes=2,
        )


def _stream(fn, pipelines: int = 1, batches: int = 10) -> list[list[int]]:
    """The global batches a dataset_fn yields: per step, the union over pipelines."""
    iterators = [
        iter(fn(tf.distribute.InputContext(pipelines, i, pipelines))) for i in range(pipelines)
    ]
    steps = []
    for _ in range(batches):
        step = []
        for it in iterators:
            x, _ = next(it)
            step += [int(v) for v in x.numpy().ravel()]
        steps.append(sorted(step))
    return steps


@pytest.mark.parametrize("pipelines", [1, 2])
def test_skipping_examples_continues_the_stream_exactly(pipelines):
    source = _Indexed.source()
    full = _stream(
        make_dataset_fn(source, "train", _Indexed.data, global_batch_size=8, seed=3),
        pipelines,
        batches=30,
    )
    # Resume after 17 steps (crossing the 100-example epoch boundary at step 12.5).
    resumed = _stream(
        make_dataset_fn(
            source, "train", _Indexed.data, global_batch_size=8, seed=3, skip_examples=17 * 8
        ),
        pipelines,
        batches=13,
    )
    assert resumed == full[17:]
    # Every example once per pass over the data: no repeat, no skip.
    first_pass = sorted(v for step in full[:12] for v in step)
    assert len(set(first_pass)) == len(first_pass) == 96


# -- resume in one process -----------------------------------------------------------------


def test_interrupted_mirrored_run_resumes_under_one_device(tmp_path: Path, caplog, monkeypatch):
    import kdist.runs.plots as plots

    drawn: list[tuple[Path, list[float]]] = []  # the epochs of every curves.png drawn

    def spy(records, path, **kwargs):
        drawn.append((Path(path), [float(r["epoch"]) for r in records]))
        return write_curves(records, path, **kwargs)

    write_curves = plots.write_curves
    monkeypatch.setattr(plots, "write_curves", spy)
    run_dir = tmp_path / "run"
    stopped = kdist.Experiment(
        compose(
            [
                *BASE,
                "strategy=mirrored",
                "callbacks.extra=[{_target_: helpers.StopAtStep, step: 17}]",
            ]
        ),
        run_dir=run_dir,
    )
    stopped.fit()
    assert int(stopped.optimizer.iterations.numpy()) == 17
    assert 17 in _backup_steps(run_dir)  # saved when training ended early

    with caplog.at_level(logging.INFO, logger="kdist"):
        resumed = kdist.Experiment(compose([*BASE, "strategy=one_device"]), run_dir=run_dir)
        resumed.fit()
    assert int(resumed.optimizer.iterations.numpy()) == 36
    message = next(r.message for r in caplog.records if "resuming from" in r.message)
    assert "saved by MirroredStrategy with 2 replica(s), global batch 32, after 17 steps" in message
    assert "now OneDeviceStrategy with 1 replica(s)" in message
    assert "continuing at step 17 (epoch 2, step 5 of 12)" in message

    reference = kdist.Experiment(
        compose([*BASE, "strategy=one_device"]), run_dir=tmp_path / "reference"
    )
    reference.fit()
    assert _max_diff(_weights(resumed.model), _weights(reference.model)) < 1e-5

    # History and TensorBoard continue: one CSV row per epoch, epochs 0, 1, 2.
    with (run_dir / "history.csv").open() as handle:
        epochs = [int(row["epoch"]) for row in csv.DictReader(handle)]
    assert epochs == [0, 1, 2]
    # curves.png is drawn from all three epochs, not only the resumed ones.
    from kdist.callbacks.curves import wait_for_writes

    assert wait_for_writes(timeout=60)
    assert (run_dir / "curves.png").is_file()
    ours = [epochs for path, epochs in drawn if path == run_dir / "curves.png"]
    assert ours[-1] == [0.0, 1.0, 2.0], drawn
    # The resumed epoch's training metrics include the steps before the interruption.
    ref_loss = reference.metrics()["train"]["loss"]
    assert resumed.metrics()["train"]["loss"] == pytest.approx(ref_loss, rel=1e-4)


def test_finished_run_resumes_to_nothing_left(tmp_path: Path):
    overrides = [*BASE, "trainer.epochs=1"]
    kdist.Experiment(compose(overrides), run_dir=tmp_path).fit()
    again = kdist.Experiment(compose(overrides), run_dir=tmp_path)
    again.fit()
    assert int(again.optimizer.iterations.numpy()) == 12
    assert again.metrics()["validation"]["accuracy"] > 0


# -- integrity -----------------------------------------------------------------------------


@pytest.fixture
def three_backups(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    kdist.Experiment(compose([*BASE, "trainer.epochs=1"]), run_dir=run_dir).fit()
    assert _backup_steps(run_dir) == [5, 10, 12]
    return run_dir


def _fresh_checkpoint(run_dir: Path, *more: str):
    exp = kdist.Experiment(compose([*BASE, "trainer.epochs=1", *more]), run_dir=run_dir)
    exp.build_model()
    return exp


def test_truncated_newest_checkpoint_falls_back_to_the_previous(three_backups, caplog):
    data = three_backups / "backup" / "ckpt-12.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    exp = _fresh_checkpoint(three_backups)
    with caplog.at_level(logging.WARNING):
        assert exp.restore() == 10
    assert any("ckpt-12 cannot be restored" in r.message for r in caplog.records)


def test_mirrored_run_falls_back_to_the_previous_backup_with_its_weights(tmp_path: Path, caplog):
    # Saved and restored under MirroredStrategy (2 replicas): the weights restored from
    # the backup before a truncated newest one are those the run had at that step.
    run_dir = tmp_path / "run"
    mirrored = ["strategy=mirrored", "trainer.epochs=1"]
    exp = kdist.Experiment(
        compose([*BASE, *mirrored, "callbacks.extra=[{_target_: helpers.StopAtStep, step: 10}]"]),
        run_dir=run_dir,
    )
    exp.fit()
    at_step_10 = _weights(exp.model)
    exp = kdist.Experiment(compose([*BASE, *mirrored]), run_dir=run_dir)
    exp.fit()
    assert _backup_steps(run_dir) == [5, 10, 12]
    data = run_dir / "backup" / "ckpt-12.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    check = _fresh_checkpoint(run_dir, "strategy=mirrored")
    with caplog.at_level(logging.WARNING):
        assert check.restore() == 10
    assert any("ckpt-12 cannot be restored" in r.message for r in caplog.records)
    assert _max_diff(_weights(check.model), at_step_10) == 0.0


def test_corrupt_index_file_falls_back_to_the_previous(three_backups):
    index = three_backups / "backup" / "ckpt-12.index"
    raw = bytearray(index.read_bytes())
    for i in range(0, len(raw), 7):
        raw[i] ^= 0xFF
    index.write_bytes(bytes(raw))
    assert _fresh_checkpoint(three_backups).restore() == 10


def test_corrupt_state_file_still_restores_the_newest(three_backups):
    (three_backups / "backup" / "checkpoint").write_text("model_checkpoint_path: {{{ garbage")
    exp = _fresh_checkpoint(three_backups)
    assert exp.restore() == 12
    # Training on from there keeps working: the unreadable state file is moved aside.
    exp.fit()
    assert list((three_backups / "backup").glob("checkpoint.unreadable-*"))


def test_unreadable_checkpoints_are_an_error_not_a_fresh_start(three_backups):
    for index in (three_backups / "backup").glob("*.index"):
        index.write_bytes(b"not an index")
    with pytest.raises(CheckpointError, match="none of the 3 checkpoint"):
        _fresh_checkpoint(three_backups).restore()
    data_only = three_backups / "lonely"
    data_only.mkdir()
    (data_only / "ckpt-3.data-00000-of-00001").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="without an index file"):
        restore_latest(tf.train.Checkpoint(), data_only)


def test_empty_directory_starts_fresh_and_leftovers_are_cleaned(tmp_path: Path):
    run_dir = tmp_path / "run"
    leftover = run_dir / "backup" / "ckpt-7_temp" / "part-00000-of-00001"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half a save")
    exp = kdist.Experiment(compose([*BASE, "trainer.epochs=1"]), run_dir=run_dir)
    assert exp.restore() == 0
    exp.fit()
    assert not leftover.parent.exists()
    assert _backup_steps(run_dir) == [5, 10, 12]


def _writer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "kdist-checkpoint-writer"}


def test_a_fit_that_fails_ends_its_writer_thread(tmp_path: Path):
    # Found when test_sync_overlap's crashed fits, run first in one process, left three
    # writer threads alive (each holding its run's model and checkpoint).
    before = _writer_threads()
    exp = kdist.Experiment(compose([*BASE, "trainer.epochs=1"]), run_dir=tmp_path)
    crash_at_step(exp, 7)
    assert _backup_steps(tmp_path) == [5]  # the save made before the failure is complete
    assert not _writer_threads() - before
    exp.fit()  # a later fit starts a writer again, and ends it
    assert _backup_steps(tmp_path) == [5, 10, 12]
    assert not _writer_threads() - before


def test_periodic_checkpoints_keep_the_newest(tmp_path: Path):
    # Writer threads another test of the process may hold are not this one's.
    before = {t for t in threading.enumerate() if t.name == "kdist-checkpoint-writer"}
    overrides = [*BASE, "callbacks.checkpoint.every_n_steps=4", "callbacks.checkpoint.keep=2"]
    exp = kdist.Experiment(compose(overrides), run_dir=tmp_path)
    exp.fit()
    kept = sorted(int(p.stem.split("-")[1]) for p in tmp_path.glob("checkpoints/*.index"))
    assert kept == [32, 36]
    # Saved asynchronously; when training ends TensorFlow's writing thread is stopped
    # (a tuner runs many trials in one process), and a second `fit` restarts it.
    helper = exp.controller.checkpoint._async_checkpointer_impl
    assert not helper._async_save_thread.is_alive()
    exp.fit()  # resumes from the backup at the last step: nothing to train, nothing hangs
    exp.cfg.trainer.epochs = 4
    exp.fit()
    assert not helper._async_save_thread.is_alive()
    kept = sorted(int(p.stem.split("-")[1]) for p in tmp_path.glob("checkpoints/*.index"))
    assert kept == [44, 48]
    # kdist's own writer thread ends with training too.
    assert not [
        t for t in threading.enumerate() if t.name == "kdist-checkpoint-writer" and t not in before
    ]


def _saver(exp: kdist.Experiment, directory: Path) -> PeriodicCheckpoint:
    assert exp.controller is not None
    return PeriodicCheckpoint(
        model=exp.controller.model,
        checkpoint=exp.controller.checkpoint,
        state=exp.controller.state,
        directory=directory,
        every_n_steps=0,
        keep=2,
    )


def _built(tmp_path: Path) -> kdist.Experiment:
    """An experiment of `BASE` with its model built (no training yet)."""
    exp = kdist.Experiment(compose(BASE), run_dir=tmp_path)
    exp.build_model()
    assert exp.runner is not None and exp.model is not None
    return exp


def _fail_writes(monkeypatch) -> None:
    """Make every asynchronous write fail as a full disk would."""

    def fail(self, prefix: str) -> None:
        raise OSError(f"disk full writing {prefix}")

    monkeypatch.setattr(writer_module.HostWriter, "write", fail)


def test_an_asynchronous_save_holds_the_state_of_its_step_not_a_later_one(tmp_path: Path):
    exp = kdist.Experiment(compose(BASE), run_dir=tmp_path)
    exp.build_model()
    assert exp.runner is not None and exp.model is not None
    saver = _saver(exp, tmp_path / "async")
    assert saver.asynchronous
    exp.runner.train_steps(3)
    at_3 = _weights(exp.model)
    path = saver.save(3, wait=False)
    assert path == str(tmp_path / "async" / "ckpt-3")
    exp.runner.train_steps(4)  # at once: the write may still be in progress
    saver.sync()
    assert tf.train.get_checkpoint_state(str(tmp_path / "async")).model_checkpoint_path == path
    exp.controller.checkpoint.restore(path).assert_existing_objects_matched()
    assert _max_diff(_weights(exp.model), at_3) == 0.0
    assert int(exp.controller.state.steps.numpy()) == 3
    assert int(exp.model.optimizer.iterations.numpy()) == 3
    saver.finish(3)


def test_the_call_after_a_save_copies_the_state_of_the_saved_step(tmp_path: Path, monkeypatch):
    # During `fit`, a save's host copy is made by the next call of the train function,
    # before its first step: no call of its own. Every backup must still hold the
    # weights, optimizer step and training step of its own step, to the bit.
    import keras

    eager: list[int] = []
    snapshot = writer_module.HostWriter.snapshot

    def counted(self, weights, steps):
        eager.append(steps)
        return snapshot(self, weights, steps)

    monkeypatch.setattr(writer_module.HostWriter, "snapshot", counted)
    seen: dict[int, list[np.ndarray]] = {}

    class Record(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            seen[self.epoch * 12 + batch + 1] = _weights(self.model)

    cfg = compose([*BASE, "callbacks.backup.keep=20", "callbacks.checkpoint.enabled=false"])
    exp = kdist.Experiment(cfg, run_dir=tmp_path)
    exp.fit(callbacks=[Record()])
    assert _backup_steps(tmp_path) == [5, 10, 15, 20, 25, 30, 35, 36]
    # The first save is copied by the next call (its set is free); a later one copies
    # on its own while that set is still written, and so does the last one (no call
    # follows it). Every backup holds its own step either way.
    assert 5 not in eager and eager[-1] == 36
    assert exp.controller is not None and exp.model is not None
    for step in _backup_steps(tmp_path):
        path = str(tmp_path / "backup" / f"ckpt-{step}")
        exp.controller.checkpoint.restore(path).assert_existing_objects_matched()
        assert _max_diff(_weights(exp.model), seen[step]) == 0.0, step
        assert int(exp.controller.state.steps.numpy()) == step
        assert int(exp.model.optimizer.iterations.numpy()) == step


def test_at_most_one_asynchronous_save_is_in_flight(tmp_path: Path, monkeypatch):
    # The bound the README states: a save waits for the write of the one before it, so
    # when save N starts every earlier save is complete (a crash loses one save at most).
    release = threading.Event()
    writing: list[str] = []
    write = writer_module.HostWriter.write

    def held(self, prefix: str) -> None:
        writing.append(prefix)
        assert release.wait(30)
        write(self, prefix)

    monkeypatch.setattr(writer_module.HostWriter, "write", held)
    exp = _built(tmp_path)
    saver = _saver(exp, tmp_path / "bound")
    saver.keep = 3
    exp.runner.train_steps(2)
    at_2 = _weights(exp.model)
    saver.save(2, wait=False)  # its write is held
    exp.runner.train_steps(1)
    at_3 = _weights(exp.model)
    second = threading.Thread(target=saver.save, args=(3,), kwargs={"wait": False})
    second.start()
    second.join(1.0)
    assert second.is_alive()  # waits for save 2: no second set of host copies
    assert _backup_steps_in(tmp_path / "bound") == []
    release.set()
    second.join(30)
    assert not second.is_alive()
    saver.sync()
    assert _backup_steps_in(tmp_path / "bound") == [2, 3]
    assert [Path(p).name for p in writing] == ["ckpt-2", "ckpt-3"]
    for steps, expected in ((2, at_2), (3, at_3)):  # each holds its own step
        exp.controller.checkpoint.restore(str(tmp_path / "bound" / f"ckpt-{steps}"))
        assert _max_diff(_weights(exp.model), expected) == 0.0
        assert int(exp.controller.state.steps.numpy()) == steps
    saver.finish(3)


def test_a_deferred_saves_write_runs_beside_the_steps_of_the_call_that_copies_it(
    tmp_path: Path, monkeypatch
):
    # The call after a save copies its variables before its steps and says so: the
    # write starts then, beside the steps (a checkpoint a few steps after a backup no
    # longer waits for the backup's write). A step of this model waits for the write
    # to start: were the write queued only after the call, the step would time out.
    import keras

    write_started = threading.Event()
    armed = threading.Event()
    waited: list[bool] = []  # by the armed step: whether the write had started
    write = writer_module.HostWriter.write

    def recorded(self, prefix: str) -> None:
        write_started.set()
        write(self, prefix)

    monkeypatch.setattr(writer_module.HostWriter, "write", recorded)

    def wait_for_write(x):
        if armed.is_set():
            waited.append(write_started.wait(60))
        return x

    class WaitsForTheWrite(keras.layers.Layer):
        def call(self, x):
            y = tf.py_function(wait_for_write, [x], x.dtype)
            y.set_shape(x.shape)
            return y

    exp = kdist.Experiment(compose(BASE), run_dir=tmp_path)
    with exp.strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                WaitsForTheWrite(),
                keras.layers.Flatten(),
                keras.layers.Dense(10),  # logits, as the config's loss takes them
            ]
        )
    exp.build_model(model)
    exp._controller()  # bound to the config's data, as a `fit` binds it first
    assert exp.runner is not None
    saver = _saver(exp, tmp_path / "beside")
    saver.bind(exp.runner)  # as a `fit` does: the runner's calls make the copies
    exp.runner.train_steps(2)
    at_2 = _weights(exp.model)
    saver.save(2, wait=False)  # deferred: the next call copies it
    time.sleep(0.2)  # past the writer's gate (`GATE_SECONDS`): the job waits for the copy
    assert not write_started.is_set()
    armed.set()
    exp.runner.train_steps(1)
    saver.after_steps(3)  # the call's copy is checked (finite)
    saver.sync()
    assert waited == [True]
    assert _backup_steps_in(tmp_path / "beside") == [2]
    exp.controller.checkpoint.restore(str(tmp_path / "beside" / "ckpt-2"))
    assert _max_diff(_weights(exp.model), at_2) == 0.0
    saver.finish(3)


def test_a_deferred_save_that_no_call_copies_is_dropped_and_nothing_waits_for_it(
    tmp_path: Path,
):
    # Its write is queued at once and waits for the copy: a run that ends on an error
    # before its next call drops the save (`finish_writes`), and the queued job returns
    # without writing instead of holding the writer thread (and the process's exit).
    exp = _built(tmp_path)
    saver = _saver(exp, tmp_path / "dropped")
    saver.bind(exp.runner)
    exp.runner.train_steps(1)
    saver.save(1, wait=False)  # deferred to a call that never comes
    finishing = threading.Thread(target=writer_module.finish_writes)
    finishing.start()
    finishing.join(60)
    assert not finishing.is_alive()
    assert _backup_steps_in(tmp_path / "dropped") == []
    exp.runner.train_steps(1)  # the set is free again: the next save writes
    at_2 = _weights(exp.model)
    saver.save(2)
    assert _backup_steps_in(tmp_path / "dropped") == [2]
    exp.controller.checkpoint.restore(str(tmp_path / "dropped" / "ckpt-2"))
    assert _max_diff(_weights(exp.model), at_2) == 0.0
    saver.finish(2)


def test_a_queued_write_starts_when_the_training_thread_enters_a_call(tmp_path: Path, monkeypatch):
    # Between two calls the training thread runs the hooks; the writer starts a job
    # only once the controller opens the gate around a call, or `sync` waits for it.
    from kdist.engine.checkpoint.host_copies import TRAIN_CALLS

    monkeypatch.setattr(writer_module, "GATE_SECONDS", 30.0)
    started = threading.Event()
    write = writer_module.HostWriter.write

    def spy(self, prefix: str) -> None:
        started.set()
        write(self, prefix)

    monkeypatch.setattr(writer_module.HostWriter, "write", spy)
    exp = _built(tmp_path)
    saver = _saver(exp, tmp_path / "gated")
    exp.runner.train_steps(2)
    saver.save(2, wait=False)
    assert not started.wait(0.5)  # no call: the gate is closed
    TRAIN_CALLS.open()
    try:
        assert started.wait(10)
    finally:
        TRAIN_CALLS.close()
    exp.runner.train_steps(1)
    saver.save(3, wait=False)
    begun = time.monotonic()
    saver.sync()  # opens the gate while it waits: no 30 s wait
    assert time.monotonic() - begun < 10
    assert _backup_steps_in(tmp_path / "gated") == [2, 3]
    saver.finish(3)


def test_the_writer_does_not_keep_a_finished_run_alive(tmp_path: Path):
    # A tuner runs many trials in one process: each trial's model must be freed.
    exp = kdist.Experiment(compose(BASE), run_dir=tmp_path)
    exp.build_model()
    assert exp.runner is not None
    saver = _saver(exp, tmp_path / "async")
    exp.runner.train_steps(1)
    saver.save(1)
    saver.finish(1)
    checkpoint = weakref.ref(exp.controller.checkpoint)
    assert checkpoint() in writer_module._WRITERS
    del exp, saver
    # Threads that just ended may still hold frames; on a loaded 2-core machine (CI beside
    # other jobs) that took over 5 s once: the loop ends as soon as the run is freed.
    deadline = time.monotonic() + 30.0
    while checkpoint() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert checkpoint() is None


def test_a_step_two_savers_save_is_written_once_and_linked(tmp_path: Path):
    # The last backup and the last checkpoint of a run are the same state: the second
    # saver links the first one's files instead of copying and writing them again.
    exp = _built(tmp_path)
    first, second = _saver(exp, tmp_path / "first"), _saver(exp, tmp_path / "second")
    exp.runner.train_steps(3)
    at_3 = _weights(exp.model)
    first.save(3, wait=False)
    second.save(3, wait=False)
    first.finish(3)
    second.finish(3)
    for name in ("index", "data-00000-of-00001"):
        a, b = tmp_path / "first" / f"ckpt-3.{name}", tmp_path / "second" / f"ckpt-3.{name}"
        assert os.stat(a).st_ino == os.stat(b).st_ino  # one file, two names
    state = tf.train.get_checkpoint_state(str(tmp_path / "second"))
    assert state.model_checkpoint_path.endswith("ckpt-3")
    exp.runner.train_steps(2)
    assert restore_latest(exp.controller.checkpoint, tmp_path / "second").endswith("ckpt-3")
    assert _max_diff(_weights(exp.model), at_3) == 0.0
    assert int(exp.controller.state.steps.numpy()) == 3
    # Removing the first one's files (its `keep`) leaves the second one whole.
    for file in (tmp_path / "first").glob("ckpt-3.*"):
        file.unlink()
    assert restore_latest(exp.controller.checkpoint, tmp_path / "second").endswith("ckpt-3")


def test_a_new_fit_links_nothing_saved_before_it(tmp_path: Path):
    # A step saved in an earlier `fit` may hold other weights (a restore went back):
    # savers made for a new `fit` write their own files.
    exp = _built(tmp_path)
    first = _saver(exp, tmp_path / "first")
    exp.runner.train_steps(3)
    first.save(3, wait=False)
    second = _saver(exp, tmp_path / "second")  # attaching starts a new fit's savers
    second.save(3)
    first.finish(3)
    second.finish(3)
    a, b = tmp_path / "first" / "ckpt-3.index", tmp_path / "second" / "ckpt-3.index"
    assert os.stat(a).st_ino != os.stat(b).st_ino


def test_a_link_to_a_failed_write_is_an_error(tmp_path: Path, monkeypatch):
    exp = _built(tmp_path)
    first, second = _saver(exp, tmp_path / "first"), _saver(exp, tmp_path / "second")
    exp.runner.train_steps(1)
    first.save(1)  # traces the writer's functions
    _fail_writes(monkeypatch)
    first.save(2, wait=False)
    second.save(2, wait=False)
    with pytest.raises(CheckpointError, match="disk full"):
        second.sync()
    assert not list((tmp_path / "second").glob("ckpt-2.*"))
    monkeypatch.undo()
    first.finish(2)
    second.finish(2)


def test_a_failed_asynchronous_write_is_an_error_on_the_training_thread(
    tmp_path: Path, monkeypatch
):
    exp = _built(tmp_path)
    saver = _saver(exp, tmp_path / "async")
    exp.runner.train_steps(1)
    saver.save(1)  # traces the writer's functions
    _fail_writes(monkeypatch)
    saver.save(2, wait=False)
    with pytest.raises(CheckpointError, match=r"disk full writing .*ckpt-2"):
        saver.sync()
    assert not (tmp_path / "async" / "ckpt-2.index").exists()
    assert tf.train.get_checkpoint_state(str(tmp_path / "async")).model_checkpoint_path.endswith(
        "ckpt-1"
    )
    monkeypatch.undo()
    saver.save(3)  # the writer goes on after an error
    assert (tmp_path / "async" / "ckpt-3.index").exists()
    saver.finish(3)


def test_a_backup_made_before_a_failure_is_complete_when_fit_raises(tmp_path: Path, monkeypatch):
    # A notebook fit that fails at step 7 (a callback raising) after the backup of step 5:
    # that backup's write, slowed here to a second, is complete when `fit` raises, so a
    # resume at once finds it (it was still being written, and the resume started at 0).
    written = writer_module.HostWriter.write

    def slow(self, prefix: str) -> None:
        time.sleep(1.0)
        written(self, prefix)

    monkeypatch.setattr(writer_module.HostWriter, "write", slow)
    crash_at_step(kdist.Experiment(compose(BASE), run_dir=tmp_path), 7)
    assert _backup_steps(tmp_path) == [5]
    state = tf.train.get_checkpoint_state(str(tmp_path / "backup"))
    assert state is not None and state.model_checkpoint_path.endswith("ckpt-5")


# -- NaN guard -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["one_device", "mirrored", "auto"])
def test_nan_stops_training_and_the_backup_keeps_finite_weights(tmp_path: Path, strategy: str):
    exp = kdist.Experiment(
        compose(
            [
                *BASE,
                f"strategy={strategy}",
                "callbacks.extra=[{_target_: helpers.InjectNaN, step: 14}]",
            ]
        ),
        run_dir=tmp_path,
    )
    with pytest.raises(NonFiniteLossError, match="after step 15"):
        exp.fit()
    steps = _backup_steps(tmp_path)
    assert steps and max(steps) < 14
    check = _fresh_checkpoint(tmp_path, f"strategy={strategy}")
    assert check.restore() == max(steps)
    assert all(np.all(np.isfinite(w)) for w in _weights(check.model))


@pytest.mark.slow
def test_nan_exits_with_status_3(tmp_path: Path):
    result = run_module(
        "kdist.train",
        [*BASE, "hydra.run.dir=run", "callbacks.extra=[{_target_: helpers.InjectNaN, step: 7}]"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    assert result.returncode == 3, result.stderr[-2000:]
    assert "kdist: error: training loss is nan after step 8" in result.stderr
    assert _backup_steps(tmp_path / "run") == [5]


def test_non_finite_weights_at_a_save_stop_the_run_with_status_3(tmp_path: Path, capsys):
    # The moving mean is NaN from step 14 on, but the training loss never reads it: the
    # guard sees a finite loss and the backup at step 15 finds the weights not finite.
    from kdist.train import run

    cfg = compose(
        [
            *BASE,
            f"run_dir={tmp_path}",
            "model=custom",
            "model._target_=helpers.norm_model",
            "callbacks.extra=[{_target_: helpers.InjectNaN, step: 14, path: moving_mean}]",
        ]
    )
    with pytest.raises(SystemExit) as stopped:
        run(cfg)
    assert stopped.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "kdist: error: the weights are not finite after step 15 (the training loss did not "
        "show it); stopped without saving this state (the newest backup, step 10, holds "
        "finite weights)"
    ]
    assert _backup_steps(tmp_path) == [5, 10]


@pytest.mark.slow
def test_nan_guard_stops_the_run_with_onednn_kernels(tmp_path: Path):
    # oneDNN's fused MatMul+BiasAdd+Relu maps NaN to 0: a NaN hidden kernel never reached
    # the loss on CPUs where TensorFlow turns oneDNN on (the fresh-machine failure).
    result = run_module(
        "kdist.train",
        [*BASE, "hydra.run.dir=run", "callbacks.extra=[{_target_: helpers.InjectNaN, step: 7}]"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO / "tests"), "TF_ENABLE_ONEDNN_OPTS": "1"},
    )
    assert result.returncode == 3, result.stderr[-2000:]
    assert "kdist: error: training loss is nan after step 8" in result.stderr
    assert _backup_steps(tmp_path / "run") == [5]


# -- best model ----------------------------------------------------------------------------


@pytest.mark.slow
def test_best_model_export(tmp_path: Path):
    import keras

    exp = kdist.Experiment(
        compose([*BASE, "callbacks.best_model.monitor=val_accuracy", "callbacks.saved_model=true"]),
        run_dir=tmp_path,
    )
    history = exp.fit()
    best = max(history.history["val_accuracy"])
    summary = json.loads((tmp_path / "metrics.json").read_text())
    assert summary["best_model"]["value"] == pytest.approx(best)
    x, y = exp.source.arrays("validation")
    model = keras.models.load_model(tmp_path / "model.keras")
    accuracy = float(np.mean(np.argmax(model.predict(x, verbose=0), axis=1) == y))
    assert accuracy == pytest.approx(best, abs=1e-6)
    served = tf.saved_model.load(str(tmp_path / "saved_model"))
    logits = served.serve(tf.constant(x[:5]))
    np.testing.assert_allclose(logits.numpy(), model.predict(x[:5], verbose=0), atol=1e-5)


# -- real crashes and signals (subprocesses) -------------------------------------------------

DETERMINISTIC = [*BASE, "runtime.deterministic=true", "hydra.run.dir=run"]


def _final_weights(run_dir: Path) -> list[np.ndarray]:
    import keras

    return _weights(keras.models.load_model(run_dir / "model.keras"))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["one_device", "auto"])
def test_sigkill_mid_epoch_then_rerun_loses_nothing(tmp_path: Path, strategy: str):
    env = {"PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests")))}
    job = [*DETERMINISTIC, f"strategy={strategy}"]
    (tmp_path / "ref").mkdir()
    reference = run_module("kdist.train", job, cwd=tmp_path / "ref", env=env)
    assert reference.returncode == 0, reference.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    # Step 23 is inside epoch 2 (12 steps an epoch); the last backup is at step 20.
    killed = run_module(
        "kdist.train",
        [*job, "callbacks.extra=[{_target_: helpers.KillAtStep, step: 23}]"],
        cwd=work,
        env=env,
    )
    assert killed.returncode == -9
    # The bound on asynchronous saves (one in flight): the backup of step 20 may still
    # have been written 3 steps later, when the kill came, but the one of step 15 was
    # complete before 20's started. So the newest complete backup is 20 or 15, never an
    # older one (two saves behind was the fresh-clone failure, [5, 10]). A kill between
    # 20's write and the manager's removal of the oldest leaves four.
    backups = _backup_steps(work / "run")
    assert backups in ([10, 15, 20], [5, 10, 15], [5, 10, 15, 20]), backups
    resumed = run_module("kdist.train", job, cwd=work, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    metrics = json.loads((work / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 36
    where = "20 (epoch 2, step 8 of 12)" if backups[-1] == 20 else "15 (epoch 2, step 3 of 12)"
    assert f"continuing at step {where}" in resumed.stdout + resumed.stderr
    assert _max_diff(_final_weights(work / "run"), _final_weights(tmp_path / "ref" / "run")) < 1e-6


@pytest.mark.slow
def test_sigkill_during_an_asynchronous_save_resumes_from_the_newest_complete(tmp_path: Path):
    # This checkout's kdist first (not an installed one), then the test helpers.
    env = {"PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests")))}
    (tmp_path / "ref").mkdir()
    reference = run_module("kdist.train", DETERMINISTIC, cwd=tmp_path / "ref", env=env)
    assert reference.returncode == 0, reference.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    report = tmp_path / "kill.txt"
    # Killed while TensorFlow's thread writes the backup of step 20 (its temporary folder
    # exists); the backup of step 15 is complete.
    killer = f"{{_target_: helpers.KillDuringAsyncSave, step: 20, report: '{report}'}}"
    killed = run_module(
        "kdist.train", [*DETERMINISTIC, f"callbacks.extra=[{killer}]"], cwd=work, env=env
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert report.read_text().startswith("temp"), report.read_text()
    state = tf.train.get_checkpoint_state(str(work / "run" / "backup"))
    assert state is not None and state.model_checkpoint_path.endswith(("ckpt-15", "ckpt-20"))
    resumed = run_module("kdist.train", DETERMINISTIC, cwd=work, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = resumed.stdout + resumed.stderr
    assert "continuing at step 15 " in log or "continuing at step 20 " in log, log[-2000:]
    assert not list((work / "run" / "backup").glob("*_temp*"))  # the leftovers are removed
    metrics = json.loads((work / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 36
    assert _max_diff(_final_weights(work / "run"), _final_weights(tmp_path / "ref" / "run")) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["one_device", "auto"])
def test_sigterm_saves_and_exits_42_then_resumes(tmp_path: Path, strategy: str):
    env = {"PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests")))}
    stopped = run_module(
        "kdist.train",
        [
            *DETERMINISTIC,
            f"strategy={strategy}",
            "callbacks.backup.every_n_steps=1000",
            "callbacks.extra=[{_target_: helpers.KillAtStep, step: 9, signal_name: SIGTERM}]",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert stopped.returncode == 42, stopped.stderr[-2000:]
    assert _backup_steps(tmp_path / "run") == [9]
    resumed = run_module(
        "kdist.train", [*DETERMINISTIC, f"strategy={strategy}"], cwd=tmp_path, env=env
    )
    assert resumed.returncode == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == 36
    assert os.path.exists(tmp_path / "run" / "model.keras")


@pytest.mark.slow
def test_sigterm_under_mirrored_saves_exits_42_and_resumes_losing_nothing(tmp_path: Path):
    # Two replicas (2 logical CPUs): the backup at the signal's step, exit 42, and a re-run
    # that ends with the weights of an uninterrupted mirrored run.
    env = {"PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests")))}
    mirrored = [*DETERMINISTIC, "strategy=mirrored", "runtime.logical_devices=2"]
    (tmp_path / "ref").mkdir()
    (tmp_path / "work").mkdir()
    reference = run_module("kdist.train", mirrored, cwd=tmp_path / "ref", env=env)
    assert reference.returncode == 0, reference.stderr[-2000:]
    stopped = run_module(
        "kdist.train",
        [
            *mirrored,
            "callbacks.backup.every_n_steps=1000",
            "callbacks.extra=[{_target_: helpers.KillAtStep, step: 9, signal_name: SIGTERM}]",
        ],
        cwd=tmp_path / "work",
        env=env,
    )
    assert stopped.returncode == 42, stopped.stderr[-2000:]
    run_dir = tmp_path / "work" / "run"
    assert _backup_steps(run_dir) == [9]
    resumed = run_module("kdist.train", mirrored, cwd=tmp_path / "work", env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 36
    assert _max_diff(_final_weights(run_dir), _final_weights(tmp_path / "ref" / "run")) < 1e-6
