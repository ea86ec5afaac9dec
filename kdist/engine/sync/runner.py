"""`LocalSGDRunner`: local SGD and DiLoCo under mirrored and multi-worker mirrored strategies."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.config.sync import SyncSettings
from kdist.data.pipeline import DatasetFn
from kdist.engine.building import optimizer_steps, own_optimizers
from kdist.engine.runner import Logs
from kdist.engine.standard_runner import StandardRunner
from kdist.engine.sync.averaging import (
    WeightAverager,
    running_statistics,
)
from kdist.engine.sync.local_reads import own_results, reset_in_replicas
from kdist.engine.sync.local_updates import install_local_updates
from kdist.engine.sync.replica_state import ReplicaStates

__all__ = ["LocalSGDRunner"]

log = logging.getLogger(__name__)


class LocalSGDRunner(StandardRunner):
    """A `StandardRunner` whose replicas train apart and average their weights.

    Each replica applies its own gradients to its own copy of the weights (no gradient
    all-reduce, `kdist.engine.sync.local_updates`), and the copies are averaged
    (`kdist.engine.sync.averaging.WeightAverager`) after every global step that is a
    multiple of `sync_every` and at the end of every epoch, so that validation, the
    epoch's checkpoints and the saved model hold averaged weights. A save between two
    averages (a backup every few steps, a preemption) averages nothing: it keeps each
    replica's own weights (`settle`), so that how often a run saves moves none of its
    averages. The first `warmup_steps` steps all-reduce their gradients as `every_step`
    does.

    **Where the average falls:** on a call boundary, not inside the traced loop of
    `steps_per_execution` steps. A call is cut where an average is due (a call runs
    `min(steps_per_execution, steps to the next average)` steps), and the average is
    its own compiled function, run between two calls. The loop inside a call then has
    no branch holding a collective (a `tf.cond` around an all-reduce inside
    `tf.range`, which multi-worker collectives would have to order identically on every
    worker), the traced step is the same as `every_step`'s, and the steps between two
    averages still run in one call when `steps_per_execution >= sync_every`. The cost
    is one extra call per average (under a millisecond on CPU).

    **Logged metrics:** the training loss and metrics are Keras's sync-on-read
    metrics, summed over the replicas when read: each epoch's logs are the mean over
    all replicas (all workers) of the values each replica measured on its own,
    drifting, weights, read once at the epoch's end (or by the epoch's last call where
    it ends with an average), as every_step's are. Between two averages no call
    communicates: each replica updates its own running sums and resets its own copy at
    an epoch's start (`kdist.engine.sync.local_reads`). A call's batch logs are its
    replicas' own results (their mean, as Keras's `fit` makes them under
    `MirroredStrategy`) on one worker; with several workers, the call that ends with an
    average reads them across workers and the calls until the next one show those
    logs again (none before the epoch's first average), the same on every worker, so
    that a callback stopping on a batch log stops every worker at the same call.

    **Optimizer state and saves:** each replica keeps its own optimizer slots (Adam's
    moments); they are not averaged. Before a save they, and each replica's weights when
    the replicas have trained since the last average, are all-gathered into banks that
    the chief's checkpoint holds (`kdist.engine.sync.replica_state.ReplicaStates`), and
    a restore gives each replica its own back; the anchor and the outer momentum of the
    last average are identical on every replica and saved whole (the
    checkpoint's `weight_average` part). The model's own weights in a save between
    averages are the first replica's (a resume under `every_step` takes their mean
    instead, `kdist.engine.checkpoint.parts`). The model's own optimizers (a GAN's two)
    are kept the same way.
    BatchNormalization's moving statistics are averaged with the weights (their mean).

    Arguments as for `StandardRunner`, plus:

    Args:
        sync: the sync settings (`strategy.sync`); `sync.local` must be true.

    Raises:
        ConfigError: naming `strategy.sync.mode` under a strategy with one replica.
    """

    def __init__(self, *, sync: SyncSettings, **kwargs: Any):
        if not sync.local:
            raise ValueError("`sync.mode` must be local_sgd or diloco for LocalSGDRunner.")
        self.sync = sync
        # Read while a train function is traced (`install_local_updates`).
        self._warming = sync.warmup_steps > 0
        self._dirty = False  # weights changed since the last average
        self._land_at: int | None = None  # the step an overlapped average is applied at
        self._exact = False  # the next call reads the metrics across replicas
        self._shown: Logs = {}  # the batch logs of the epoch's last exact read
        super().__init__(**kwargs)
        strategy = self.strategy
        self._several_workers = len(strategy.extended.worker_devices) < (
            strategy.num_replicas_in_sync
        )
        if isinstance(strategy, tf.distribute.OneDeviceStrategy):
            # `strategy=auto` that found one device (the config check refuses one_device).
            raise ConfigError(
                "strategy.sync.mode",
                "averages the replicas' weights, and the strategy (OneDeviceStrategy, what "
                "strategy=auto chose on this machine) has one replica",
                value=sync.mode,
                hint="use strategy=mirrored or multi_worker_mirrored, or sync.mode=every_step",
            )
        for optimizer in [self.optimizer, *own_optimizers(self.model)]:
            install_local_updates(optimizer, lambda: self._warming)
        dtype = _allreduce_dtype(kwargs)
        feedback = bool(kwargs.get("allreduce_error_feedback", True))
        kept = self.carried_on(kwargs.get("previous"))
        averager = kept.averager if kept is not None else None
        statistics = running_statistics(self.model)
        if averager is None or not averager.matches(self.variables, sync, dtype, statistics):
            with strategy.scope():
                averager = WeightAverager(
                    strategy=strategy,
                    variables=self.variables,
                    settings=sync,
                    dtype=dtype,
                    error_feedback=feedback,
                    statistics=statistics,
                )
                # Tracked by the averager, so saved with it: the optimizer's and those
                # of the model's own optimizers (a GAN's two), each replica's state.
                averager.replica_states = ReplicaStates(strategy=strategy, optimizer=self.optimizer)
                # Each replica's weights (and statistics) for a save between averages,
                # and what each sent with an overlapped average in flight.
                averager.replica_weights = ReplicaStates(
                    strategy=strategy,
                    optimizer=self.optimizer,
                    variables=[*self.variables, *statistics],
                )
                if averager.sent:
                    averager.sent_states = ReplicaStates(
                        strategy=strategy, optimizer=self.optimizer, variables=averager.sent
                    )
                averager.own_replica_states = [
                    ReplicaStates(strategy=strategy, optimizer=optimizer)
                    for optimizer in own_optimizers(self.model)
                ]
        # The next runner of this model carries it on; every checkpoint holds it as its
        # `weight_average` part (`kdist.engine.checkpoint.parts`).
        self.averager = averager
        log.info(
            "strategy.sync: %s, averaging every %d steps after %d synchronous steps",
            sync.mode,
            sync.sync_every,
            sync.warmup_steps,
        )

    def _make_train_function(self) -> Callable[..., tuple[Logs, Logs | None, tf.Tensor]]:
        # Three traces of the same train function: the warm-up one sums the gradients
        # across replicas, the local ones do not (`install_local_updates` reads
        # `_warming` while tracing); of those, the local one reads each replica's own
        # metrics and the exact one (a call ending with an average, several workers)
        # reads them across replicas (`_train_call_results` reads `_exact` while tracing).
        synchronous = super()._make_train_function()
        exact = super()._make_train_function()
        local = super()._make_train_function()

        def train_function(*args: Any) -> tuple[Logs, Logs | None, tf.Tensor]:
            if self._warming:
                return synchronous(*args)
            return (exact if self._exact else local)(*args)

        return train_function

    def _train_call_results(self, step_logs: Logs | None) -> tuple[Logs, Logs | None]:
        # A local call reads no metric across replicas (`kdist.engine.sync.local_reads`):
        # its batch logs are its replicas' own results, and the epoch's logs are read
        # across replicas at the epoch's end (`None`: `StandardRunner.train_loop_end`).
        if self._warming or self._exact:
            return super()._train_call_results(step_logs)
        own = own_results(self.strategy, self.model)
        if step_logs is not None:
            return step_logs, None if set(step_logs) == set(own) else step_logs
        return own, None

    def _reset_in_call(self) -> None:
        if self._warming:
            super()._reset_in_call()
        else:
            reset_in_replicas(self.strategy, self.model)

    def train_steps(self, num_steps: int) -> Logs:
        done = optimizer_steps(self.model)
        every, warmup = self.sync.sync_every, self.sync.warmup_steps
        logs: Logs | None = None
        while num_steps > 0:
            self._warming = done < warmup
            if self._warming:
                count = min(num_steps, warmup - done)
            else:
                count = min(num_steps, every - done % every)
                if self._land_at is not None:
                    count = min(count, self._land_at - done)
                if warmup and done == warmup:
                    # The first local step after the warm-up: the replicas start from the
                    # warm-up's weights, and DiLoCo's first outer step measures the change
                    # from there (not from the weights the run started with).
                    self.averager.reset_anchors()
            # Several workers: only a call that ends with an average reads the metrics
            # across workers; the others show its logs (`_shown`), the same on every
            # worker, so that a callback stopping on a batch log stops them all at once.
            self._exact = self._several_workers and (done + count) % every == 0
            logs = super().train_steps(count)
            done += count
            num_steps -= count
            if self._warming:
                continue
            if self._several_workers:
                if self._exact:
                    self._shown = logs
                else:
                    logs = self._shown
            self._dirty = True
            if done == self._land_at:
                self.averager.land()
                self._land_at = None
            if done % every == 0:
                if self.sync.overlap_steps:
                    self.averager.launch(done)
                    self._land_at = done + self.sync.overlap_steps
                else:
                    self.average()
        assert logs is not None
        return logs

    def average(self) -> None:
        """Average the replicas' weights now (an overlapped average in flight is applied
        first)."""
        step = optimizer_steps(self.model)
        if self._land_at is not None:
            assert self.averager.pending_at is not None
            sent_now = int(self.averager.pending_at.numpy()) == step
            self.averager.land()
            self._land_at = None
            if sent_now:  # sent at this step: applied, it is an average of every replica
                self._dirty = False
                return
        self.averager.average(step)
        self._dirty = False

    def settle(self) -> None:
        # Before every save (`kdist.engine.checkpoint.saver`), with no average: the
        # checkpoint holds the anchor and the outer momentum of the last average and, when
        # the replicas have trained since, each replica's own weights; a run resumed from
        # it continues exactly as the run that saved it did, and saving as often as one
        # likes moves no average.
        self.averager.wait()  # an average in flight: its all-reduce, before the gathers'
        step = optimizer_steps(self.model)
        if self._dirty:
            self.averager.replica_weights.gather(step)
        if self._land_at is not None:
            self.averager.sent_states.gather(step)
        for states in self.replica_states:
            states.gather()

    def train_loop_begin(self, *, reset_metrics: bool = True, first_step: int = 0) -> None:
        if reset_metrics:
            self._shown = {}
        super().train_loop_begin(reset_metrics=reset_metrics, first_step=first_step)

    def train_loop_end(self, *, complete: bool = True) -> dict[str, float]:
        if self._dirty:
            self.average()
        return super().train_loop_end(complete=complete)

    def evaluate(self, callbacks: Any = None) -> dict[str, float]:
        if self._dirty:
            self.average()  # validation runs on the averaged weights
        return super().evaluate(callbacks)

    def set_train_dataset_fn(self, dataset_fn: DatasetFn) -> None:
        # A restore: the restored weights, anchor and momentum are those of an average,
        # and each replica takes back its own optimizer state from the banks. A
        # checkpoint of another sync mode holds no average of its step: the averages
        # start anew from its weights.
        self.averager.wait()
        super().set_train_dataset_fn(dataset_fn)
        step = optimizer_steps(self.model)
        found = self.averager.resume(step)
        if found == "anew":
            log.info("strategy.sync: no %s state at this step, averaging anew", self.sync.mode)
        # Saved between two averages: each replica has its own weights back.
        self._dirty = found == "own"
        self._land_at = None
        if self.averager.in_flight:
            assert self.averager.pending_at is not None
            self._land_at = int(self.averager.pending_at.numpy()) + self.sync.overlap_steps
        for states in self.replica_states:
            states.spread()

    @property
    def replica_states(self) -> list[ReplicaStates]:
        """Each replica's optimizer state, kept for checkpoints: the optimizer's, then
        those of the model's own optimizers."""
        return [self.averager.replica_states, *self.averager.own_replica_states]


def _allreduce_dtype(kwargs: dict[str, Any]) -> str:
    return str(kwargs.get("allreduce_dtype", "float32"))
