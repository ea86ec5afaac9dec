"""The runner for synchronous strategies: `strategy.run` inside a `tf.function`, K steps a call."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kdist.compat.keras_private import distribute_strategy
from kdist.compat.tf_private import no_partial_batch_handling
from kdist.data.pipeline import DatasetFn
from kdist.engine.left_out import NonesLeftOut, holds_nones
from kdist.engine.runner import Logs, to_floats
from kdist.engine.snapshot import SnapshotFn
from kdist.engine.step import StepRunner

__all__ = ["StandardRunner", "worker_input_context"]


class StandardRunner(StepRunner):
    """Trains a Keras model under a synchronous `tf.distribute` strategy.

    One call of the compiled train function runs up to `steps_per_execution` steps, each
    through `strategy.run`, so small models are not dominated by per-call overhead. The
    step and the metrics are `StepRunner`'s (Keras's training contract); this class only
    distributes the data and dispatches the calls. Arguments as for `StepRunner`.
    """

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._use_train_data(self.train_dataset_fn)
        self._val_data, self._val_step = None, self.replica_test_step
        if self.validation_dataset_fn:
            self._val_data = self.strategy.distribute_datasets_from_function(
                self.validation_dataset_fn
            )
            if holds_nones(self._val_data.element_spec):
                # An optional input left out as `None` (`kdist.engine.left_out`).
                left_out, step = NonesLeftOut(self.validation_dataset_fn), self.replica_test_step
                self._val_data = self.strategy.distribute_datasets_from_function(left_out)
                self._val_step = lambda batch: step(left_out.restore(batch))
        self._iterator: Any = None
        # A saver's snapshot (`set_snapshot`), the request for the next call, and what
        # the last call that ran it returned.
        self._snapshot: SnapshotFn | None = None
        self._no_snapshot = (tf.constant(-1, tf.int32), tf.constant(0, tf.int64))
        self._which: dict[int, tf.Tensor] = {}
        self._snapshot_request: tuple[tf.Tensor, tf.Tensor] | None = None
        self._snapshot_result: tf.Tensor | None = None
        # Whether the next call resets the metrics first (`train_loop_begin`).
        self._reset_next = False
        self._flags = (tf.constant(False), tf.constant(True))
        self._train_fn = self._make_train_function()
        self._eval_fn = self._make_eval_function() if self._val_data is not None else None
        self._eval_steps_fn: Callable[..., tuple[Logs, Logs, tf.Tensor]] | None = None
        # The metrics the last `train_steps` call returned: `train_loop_end` reuses them
        # instead of reading the (mirrored) metric variables again.
        self._last_logs: Logs | None = None
        self._read_metrics: Callable[[], Logs] | None = None  # compiled at its first use

    def _call_results(self) -> tuple[Logs, Logs]:
        """A call's logs for the batch hooks and the metrics' values now (the epoch's
        logs if it was the epoch's last call): one structure unless several mirrored
        replicas make them differ (`StepRunner.batch_results`)."""
        logs = self.metric_results()
        return (self.batch_results() if self.replica_batch_logs else logs), logs

    def _train_call_results(self, step_logs: Logs | None) -> tuple[Logs, Logs | None]:
        """A train call's `_call_results`, given a model's own `train_step`'s logs;
        `None` for the metrics' values: read them at the epoch's end."""
        batch_logs, logs = self._call_results()
        if step_logs is not None:
            # Keras: the batch logs are the model's own `train_step`'s; the epoch's too
            # where they name other values than its metrics (`_get_metrics_result_or_logs`).
            return step_logs, logs if set(step_logs) == set(logs) else step_logs
        return batch_logs, logs

    def _reset_in_call(self) -> None:
        """Reset the metrics inside a train call (its first of an epoch)."""
        for metric in self.model.metrics:
            metric.reset_state()

    def _make_train_function(self) -> Callable[..., tuple[Logs, Logs | None, tf.Tensor]]:
        snapshot = self._snapshot

        def reset() -> tf.Tensor:
            self._reset_in_call()
            return tf.constant(True)

        @tf.function
        def train_function(
            iterator: Any,
            num_steps: tf.Tensor,
            which: tf.Tensor,
            steps: tf.Tensor,
            reset_first: tf.Tensor,
        ) -> tuple[Logs, Logs | None, tf.Tensor]:
            # A saver's copies first (the state of its step, the epoch's metrics
            # included), then a new epoch's metric reset, then the steps.
            finite = snapshot(which, steps) if snapshot is not None else tf.constant(True)
            with tf.control_dependencies([finite]):
                reset_done = tf.cond(reset_first, reset, lambda: tf.constant(True))
            with tf.control_dependencies([reset_done]):
                step_logs = self.run_train_steps(iterator, num_steps)
            batch_logs, logs = self._train_call_results(step_logs)
            return batch_logs, logs, finite

        return train_function

    def _make_eval_function(self) -> Callable[[], Logs]:
        strategy, replica_step, dataset = self.strategy, self._val_step, self._val_data
        assert dataset is not None

        @tf.function
        def eval_function() -> Logs:
            for batch in dataset:
                strategy.run(replica_step, args=(batch,))
            return self.metric_results()

        return eval_function

    def _make_eval_steps_function(self) -> Callable[..., tuple[Logs, Logs, tf.Tensor]]:
        strategy, replica_step = self.strategy, self._val_step

        @tf.function
        def eval_steps(iterator: Any, num_steps: tf.Tensor) -> tuple[Logs, Logs, tf.Tensor]:
            # Keras's `test_function`: up to `steps_per_execution` batches; `count` says
            # how many there were (0: the data had ended, Keras's `OutOfRangeError`).
            count = tf.constant(0, tf.int32)
            for _ in tf.range(num_steps):
                batch = iterator.get_next_as_optional()
                if not batch.has_value():
                    break
                strategy.run(replica_step, args=(batch.get_value(),))
                count += 1
            return (*self._call_results(), count)

        return eval_steps

    def _evaluate_in_calls(self, callbacks: Any) -> Logs:
        """Keras's `evaluate` loop: one call of `steps_per_execution` batches between
        `on_test_batch_begin(step)` and `on_test_batch_end(last batch, running logs)`."""
        assert self._val_data is not None
        if self._eval_steps_fn is None:
            self._eval_steps_fn = self._make_eval_steps_function()
        per_call = self.steps_per_execution
        num_steps = tf.constant(per_call, tf.int32)
        # Keras's `EpochIterator`: with a known count of batches it makes no call past
        # them; with an unknown one, the call that finds the data ended has a begin hook
        # only (`catch_stop_iteration`).
        known = int(self._val_data.cardinality)
        if known < 0:  # a distributed dataset's: the pipeline's own count where it has one
            known = int(getattr(self.validation_dataset_fn, "batches", -1))
        iterator = iter(self._val_data)
        logs = self.metric_results()
        self.model.stop_evaluating = False
        step = 0
        while known < 0 or step < known:
            callbacks.on_test_batch_begin(step)
            batch_logs, now, count = self._eval_steps_fn(iterator, num_steps)
            if int(count) == 0:
                break
            # Keras: `logs = self._get_metrics_result_or_logs(logs)` after the loop.
            logs = now
            callbacks.on_test_batch_end(step + per_call - 1, batch_logs)
            step += per_call
            if self.model.stop_evaluating:
                break
        return logs

    def set_train_dataset_fn(self, dataset_fn: DatasetFn) -> None:
        """Replace the training data (e.g. advanced to a resumed position).

        The compiled train function takes the iterator as an argument, so it is not
        traced again.
        """
        self._use_train_data(dataset_fn)
        self._iterator = None

    def _use_train_data(self, dataset_fn: DatasetFn) -> None:
        """Distribute `dataset_fn`'s stream, or its `epoch_pass`: one pass over data given
        to `fit` that each epoch iterates afresh (Keras's `EpochIterator` makes an
        iterator an epoch; `kdist.data.given_pipeline.partial_dataset_fn`)."""
        epoch_pass = getattr(dataset_fn, "epoch_pass", None)
        self._per_epoch = epoch_pass is not None
        self._train_data = self._distribute_train(epoch_pass or dataset_fn)
        self._epoch_end: Callable[[], None] | None = getattr(dataset_fn, "on_epoch_end", None)
        self._iterator_ahead = bool(getattr(epoch_pass, "iterator_ahead", False))
        self.open_ended = bool(getattr(dataset_fn, "open_ended", False))

    def _distribute_train(self, dataset_fn: DatasetFn) -> Any:
        """The training input: the distributed dataset of `dataset_fn`, lighter on CPUs.

        TensorFlow's default input path stages every batch through a multi-device
        iterator made for copying to accelerators; on CPU devices, where the batch
        already is, that costs about 0.25 ms per batch under OneDeviceStrategy and
        0.3-0.4 ms under MirroredStrategy, i.e. 10-20% of a small model's step
        (benchmarks/README.md), and under MultiWorkerMirroredStrategy with one CPU
        device a worker about 4.7 ms of CPU a step of the CNN at batch 16 (15 % of the
        step; `benchmarks.time_split`). With CPU devices only, OneDeviceStrategy and
        each worker of MultiWorkerMirroredStrategy with one device iterate their
        pipeline themselves (the worker's `InputContext`, as the strategy's own
        `distribute_datasets_from_function` makes it: the same shard of every global
        batch), and MirroredStrategy gets one input pipeline per replica placed on the
        replica's device (`InputReplicationMode.PER_REPLICA`); all give every step the
        same global batch as before. Other cases keep the default path.
        """
        strategy = self.strategy
        local = (tf.distribute.OneDeviceStrategy, tf.distribute.MirroredStrategy)
        multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        # Only these strategies list their devices (the default strategy raises).
        listed = multi_worker or type(strategy) in local
        devices = tuple(strategy.extended.worker_devices) if listed else ()
        on_cpu = all(tf.DeviceSpec.from_string(d).device_type == "CPU" for d in devices)
        if multi_worker and on_cpu and len(devices) == 1:
            # No partial batch handling either: a worker's data given to `fit` ends at the
            # same step as every other's (`every_replica_every_step`), and config data
            # repeats without end.
            return dataset_fn(worker_input_context(strategy))
        if type(strategy) not in local:
            if getattr(dataset_fn, "every_replica_every_step", False):
                # Data given to `fit`: every worker reads every global batch and its passes
                # end at the same step everywhere; TensorFlow would all-reduce across the
                # workers at every step whether each still has a batch.
                with no_partial_batch_handling(strategy):
                    return strategy.distribute_datasets_from_function(dataset_fn)
            return strategy.distribute_datasets_from_function(dataset_fn)
        if on_cpu and isinstance(strategy, tf.distribute.OneDeviceStrategy):
            return dataset_fn(tf.distribute.InputContext(1, 0, 1))
        # Data given to `fit` as a dataset or a Python stream: one pipeline (in_hand).
        if on_cpu and not getattr(dataset_fn, "one_pipeline", False):
            options = tf.distribute.InputOptions(
                experimental_fetch_to_device=False,
                experimental_place_dataset_on_device=True,
                experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            )
            return strategy.distribute_datasets_from_function(dataset_fn, options)
        return strategy.distribute_datasets_from_function(dataset_fn)

    # -- the Runner interface ----------------------------------------------------------

    def fit_begin(self) -> None:
        # Keras: `self._maybe_symbolic_build(iterator=epoch_iterator)`, then
        # `epoch_iterator.reset()`: with a model made in a strategy's scope, `fit` reads
        # the first batch of an iterator of its own before training, so a seeded
        # `shuffle(reshuffle_each_iteration=True)` draws one order more. kdist makes that
        # iterator under several replicas, where Keras's `fit` in `MirroredStrategy` is
        # its judge; one device is judged against `fit` on a model made outside any
        # scope, which makes none.
        strategy = self.strategy
        if (
            self._per_epoch
            and self._iterator_ahead
            and strategy.num_replicas_in_sync > 1
            and distribute_strategy(self.model) is not None
        ):
            with contextlib.suppress(StopIteration, tf.errors.OutOfRangeError):
                # Read, as Keras reads it: a `cache()` that was not read to its end
                # is dropped, and the first epoch's pass draws again.
                next(iter(self._train_data))

    def train_loop_begin(self, *, reset_metrics: bool = True, first_step: int = 0) -> None:
        # The reset is made by the epoch's first call, before its steps (one call less
        # per epoch on the training thread), or by `train_loop_end` if no call comes.
        self._reset_next = reset_metrics
        self._last_logs = None
        self.data_ended = False
        if self._per_epoch and (reset_metrics or self._iterator is None):
            # Keras: `EpochIterator._enumerate_iterator`'s `iter(self._get_iterator())`
            # each epoch. kdist: a resumed epoch skips the steps it had taken.
            self._iterator = iter(self._train_data)
            for _ in range(first_step):
                next(self._iterator)
        if self._iterator is None:
            self._iterator = iter(self._train_data)

    def train_steps(self, num_steps: int) -> Logs:
        if self._iterator is None:
            self._iterator = iter(self._train_data)
        request, self._snapshot_request = self._snapshot_request, None
        try:
            batch_logs, logs, finite = self._train_fn(
                self._iterator,
                tf.constant(num_steps, dtype=tf.int32),
                *(request or self._no_snapshot),
                self._flags[self._reset_next],
            )
        except tf.errors.OutOfRangeError:
            if not self.open_ended:
                raise
            # A call of one step found the data ended: it ran none (Keras's
            # `EpochIterator` ends the epoch there).
            self.data_ended, self._snapshot_request = True, request
            return {}
        self._reset_next = False
        if request is not None:
            self._snapshot_result = finite
        self._last_logs = logs
        return batch_logs

    def set_snapshot(self, snapshot: SnapshotFn) -> bool:
        if snapshot is not self._snapshot:
            self._snapshot = snapshot
            self._train_fn = self._make_train_function()  # traced again at its next call
        return True

    def snapshot_next_call(self, which: int, steps: int) -> None:
        if self._snapshot is None:
            raise RuntimeError("`snapshot_next_call` before `set_snapshot`")
        if which not in self._which:
            self._which[which] = tf.constant(which, tf.int32)
        self._snapshot_request = (self._which[which], tf.constant(steps, tf.int64))
        self._snapshot_result = None

    def cancel_snapshot(self) -> None:
        self._snapshot_request = None

    def pop_snapshot(self) -> tf.Tensor | None:
        result, self._snapshot_result = self._snapshot_result, None
        return result

    def train_loop_end(self, *, complete: bool = True) -> dict[str, float]:
        if self._per_epoch and complete:
            # Keras (`EpochIterator._enumerate_iterator`, after a pass is read): a new
            # iterator at once (`self._current_iterator = iter(...)`), which the next
            # epoch replaces again; making one draws a seeded shuffle's next order, so
            # kdist makes it too. Then `self.data_adapter.on_epoch_end()`.
            if self._iterator_ahead:
                self._iterator = iter(self._train_data)
            if self._epoch_end is not None:
                self._epoch_end()
        # The last call's results are the metrics' values now: nothing ran since.
        logs = self._last_logs
        if logs is None:  # no step in this epoch, or its last call read no metrics
            if self._reset_next:
                self.reset_metrics()
                self._reset_next = False
            if self._read_metrics is None:
                self._read_metrics = tf.function(self.metric_results)
            logs = self._read_metrics()
        return to_floats(logs)

    def evaluate(self, callbacks: Any = None) -> dict[str, float]:
        if self._eval_fn is None:
            return {}
        self.reset_metrics()
        if callbacks is not None:
            return to_floats(self._evaluate_in_calls(callbacks))
        return to_floats(self._eval_fn())


def worker_input_context(strategy: tf.distribute.Strategy) -> tf.distribute.InputContext:
    """This worker's `InputContext` under `MultiWorkerMirroredStrategy`: one input
    pipeline per worker, the chief's first, as the strategy's own
    `distribute_datasets_from_function` numbers them (`multi_worker_util.id_in_cluster`)."""
    resolver = strategy.cluster_resolver
    jobs = resolver.cluster_spec().as_dict()
    chiefs = len(jobs.get("chief", ()))
    pipelines = max(chiefs + len(jobs.get("worker", ())), 1)
    index = chiefs + int(resolver.task_id) if resolver.task_type == "worker" else 0
    return tf.distribute.InputContext(pipelines, index, strategy.num_replicas_in_sync)
