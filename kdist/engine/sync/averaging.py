"""`WeightAverager`: the replicas' weights made one again (local SGD's mean, DiLoCo's step)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import flatten_layers
from kdist.config.sync import SyncSettings
from kdist.strategies.compression import ErrorFeedback

__all__ = ["SyncCount", "WeightAverager", "running_statistics"]


@dataclass
class SyncCount:
    """What one weight average sends, counted while its function is traced.

    `all_reduces` is the number of all-reduce calls in one average (one: the changes of
    every weight travel as one batch), `bytes` what each replica hands them, `syncs` the
    averages run so far by this process (counted on the host, per call).
    """

    dtype: str
    all_reduces: int = 0
    bytes: int = 0
    syncs: int = 0
    traces: list[int] = field(default_factory=list)


class WeightAverager(tf.Module):
    """Averages each replica's weights, starting from the weights of the last average.

    Each replica sends the change of its weights since the last average (its *delta*),
    in `dtype` (16 bits halve the bytes; with `error_feedback` each replica keeps what
    the cast dropped and adds it to its next delta, as for gradients in
    `kdist.strategies.compression`). The mean delta gives the new weights:

    - `local_sgd`: `anchor + mean(delta)`, the mean of the replicas' weights;
    - `diloco`: an outer SGD step with Nesterov momentum whose gradient is
      `-mean(delta)` (DiLoCo's outer gradient, `anchor - mean(weights)`):
      `m = mu * m + g`, `anchor -= lr * (g + mu * m)` (PyTorch's `SGD(nesterov=True)`).

    The anchor (the weights of the last average) and the outer momentum are mirrored
    variables, identical on every replica, so a checkpoint made right after an average
    holds everything the next one needs. The `statistics` (BatchNormalization's moving
    mean and variance, which each replica updates from its own batches) are replaced by
    their plain mean at every average, in the same all-reduce, with no outer step: after
    an average every replica holds the same weights, statistics included. Build it
    inside `strategy.scope()`.

    **Overlapped** (`settings.overlap_steps` = k > 0, `launch` and `land`): each replica
    keeps a copy of the weights it sends, the all-reduce and the outer step run on a
    thread of their own while the replicas take their next k local steps (no collective
    there), and after them each replica takes the new weights plus what it learnt since
    it sent: `new + (weights - sent)` (with k = 0, `average`'s result), its statistics
    alike. The step the result is applied at is fixed, so the run does not depend on how
    fast the thread is.

    Args:
        strategy: the run's strategy (mirrored or multi-worker mirrored).
        variables: the trainable variables to average.
        settings: the sync mode and its outer optimizer.
        dtype: the type the deltas travel in: `float32`, `bfloat16` or `float16`.
            Defaults to `"float32"`.
        error_feedback: carry each replica's rounding residual into its next delta
            (16-bit `dtype` only). Defaults to `True`.
        statistics: non-trainable variables averaged as they are, in float32
            (`running_statistics`). Defaults to none.
    """

    def __init__(
        self,
        *,
        strategy: tf.distribute.Strategy,
        variables: Sequence[Any],
        settings: SyncSettings,
        dtype: str = "float32",
        error_feedback: bool = True,
        statistics: Sequence[Any] = (),
    ):
        super().__init__(name="kdist_weight_average")
        self._strategy = strategy
        self._variables = list(variables)
        self._statistics = list(statistics)
        self.settings = settings
        self.wire = tf.as_dtype(dtype)
        self.anchors = [
            tf.Variable(_value(v), trainable=False, name=f"anchor_{i}")
            for i, v in enumerate(self._variables)
        ]
        self.momentum = (
            [
                tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"outer_m_{i}")
                for i, v in enumerate(self._variables)
            ]
            if settings.mode == "diloco"
            else []
        )
        self.residuals = (
            ErrorFeedback(self._variables) if error_feedback and self.wire != tf.float32 else None
        )
        self.count = SyncCount(dtype)
        # The optimizer step of the last average (saved with the anchors): a restore of
        # a checkpoint written without these anchors (another `sync.mode`) finds another
        # step there and starts anew from the restored weights (`restart_unless_synced`).
        self.synced_at = tf.Variable(tf.constant(-1, tf.int64), trainable=False, name="synced_at")
        # Each replica's optimizer state and weights for checkpoints (`LocalSGDRunner`
        # sets them): a save between two averages keeps every replica's own.
        self.replica_states: Any = None
        self.replica_weights: Any = None
        self.own_replica_states: list[Any] = []
        self._average = tf.function(self._cross_replica_average)
        # Overlapped averages: what each replica sent, the result waiting to be applied
        # (anchors, momentum, statistics) and the step it was sent at (-1: none).
        self.sent: list[tf.Variable] = []
        self.pending: list[tf.Variable] = []
        self.pending_at: tf.Variable | None = None
        self.sent_states: Any = None  # each replica's `sent`, for checkpoints
        self._flight: _Flight | None = None
        if settings.overlap_steps > 0:
            kept = self._variables + self._statistics
            self.sent = [
                tf.Variable(_value(v), trainable=False, name=f"sent_{i}")
                for i, v in enumerate(kept)
            ]
            waiting = self.anchors + self.momentum + [_tf_variable(v) for v in self._statistics]
            self.pending = [
                tf.Variable(tf.convert_to_tensor(v), trainable=False, name=f"pending_{i}")
                for i, v in enumerate(waiting)
            ]
            self.pending_at = tf.Variable(
                tf.constant(-1, tf.int64), trainable=False, name="pending_at"
            )
            self._snapshot = tf.function(self._cross_replica_snapshot)
            self._send = tf.function(self._cross_replica_send)
            self._land = tf.function(self._cross_replica_land)

    def matches(
        self,
        variables: Sequence[Any],
        settings: SyncSettings,
        dtype: str,
        statistics: Sequence[Any] = (),
    ) -> bool:
        """Whether this averager serves `variables` (and `statistics`) with `settings` in
        `dtype`."""
        same = _same(variables, self._variables) and _same(statistics, self._statistics)
        return same and settings == self.settings and tf.as_dtype(dtype) == self.wire

    def saved_state(self, *, replica_weights: bool = True) -> tf.Module:
        """What the averager saves, with no edge to the optimizer or the model: to restore
        it from where checkpoints of kdist 2915c21 and before hold it, inside the
        optimizer's node (`optimizer/kdist_weight_average`). Without `replica_weights`,
        as 3407276 and before saved it (a save then followed an average)."""
        view = tf.Module(name=self.name)
        view.anchors, view.momentum, view.synced_at = self.anchors, self.momentum, self.synced_at
        if self.residuals is not None:
            view.residuals = self.residuals
        view.replica_states = _banks_of(self.replica_states)
        view.own_replica_states = [_banks_of(states) for states in self.own_replica_states]
        if replica_weights:
            view.replica_weights = _banks_of(self.replica_weights)
            if self.sent:
                view.sent, view.pending, view.pending_at = self.sent, self.pending, self.pending_at
                view.sent_states = _banks_of(self.sent_states)
        return view

    def reset_anchors(self) -> None:
        """Take the current (identical) weights as the last average's: a new start."""
        for anchor, variable in zip(self.anchors, self._variables, strict=True):
            anchor.assign(_value(variable))

    def average(self, step: int) -> None:
        """Average the replicas' weights now, at optimizer step `step` (call in
        cross-replica context, eagerly)."""
        self._average()
        self.synced_at.assign(step)
        self.count.syncs += 1

    @property
    def in_flight(self) -> bool:
        """Whether an overlapped average was sent and is not applied yet."""
        return self.pending_at is not None and int(self.pending_at.numpy()) >= 0

    def launch(self, step: int) -> None:
        """Send the replicas' weights at optimizer step `step` to be averaged beside the
        next steps (`settings.overlap_steps` > 0); `land` applies the result."""
        assert self.pending_at is not None and self._flight is None
        self._snapshot()  # before the next step changes the weights
        self.pending_at.assign(step)
        self.count.syncs += 1
        self._flight = _Flight(self._send)

    def wait(self) -> None:
        """Return when the average in flight is computed (before any other collective:
        a save's gather, validation's metric reads)."""
        flight, self._flight = self._flight, None
        if flight is not None:
            flight.join()

    def land(self) -> None:
        """Apply the average in flight: each replica takes its result plus what it
        learnt since it sent."""
        assert self.pending_at is not None
        self.wait()
        self._land()
        self.synced_at.assign(self.pending_at)
        self.pending_at.assign(-1)

    def forget(self) -> None:
        """Hold no state of any step (the checkpoint restored had none of this averager)."""
        self.synced_at.assign(-1)
        for states in (self.replica_weights, self.sent_states):
            if states is not None:
                states.gathered_at.assign(-1)
        if self.pending_at is not None:
            self.pending_at.assign(-1)

    def resume(self, step: int) -> str:
        """After a restore at optimizer step `step`, continue from what the checkpoint holds.

        Returns:
            `"own"`: saved between two averages, each replica has its own weights back
            (and what it sent, with an average in flight); `"average"`: saved right after
            an average; `"anew"`: the checkpoint holds no state of this averager (a run
            resumed from an `every_step` checkpoint, or from a `local_sgd` one into
            `diloco`): the restored weights are taken as the last average's and the outer
            momentum is cleared.
        """
        if self.replica_weights is not None and self.replica_weights.spread(step):
            if self.in_flight and not self.sent_states.spread(step):
                raise ValueError(
                    f"the checkpoint of step {step} has an average in flight "
                    "but not what each replica sent"
                )
            return "own"
        if self.pending_at is not None and self.in_flight:
            self.pending_at.assign(-1)  # not restored with the weights it belongs to
        if int(self.synced_at.numpy()) == step:
            return "average"
        self.reset_anchors()
        for buffer in self.momentum:
            buffer.assign(tf.zeros_like(buffer))
        self.synced_at.assign(step)
        return "anew"

    # -- the traced average --------------------------------------------------------------

    def _cross_replica_average(self) -> None:
        strategy = self._strategy
        new_values = strategy.run(self._replica_average)
        # The new values are the same on every replica; each replica's copy of a mirrored
        # variable is assigned its own replica's value, with no further reduction (as the
        # optimizer does: `strategy.extended.update`).
        targets = [_tf_variable(v) for v in self._variables] + self.anchors + self.momentum
        targets += [_tf_variable(v) for v in self._statistics]
        for target, value in zip(targets, new_values, strict=True):
            strategy.extended.update(target, _assign, args=(value,), group=False)

    def _replica_average(self) -> list[tf.Tensor]:
        # Read in replica context: each replica's own copies.
        weights = [tf.convert_to_tensor(_tf_variable(v)) for v in self._variables]
        statistics = [tf.convert_to_tensor(_tf_variable(v)) for v in self._statistics]
        anchors, momentum, means = self._replica_outer(weights, statistics)
        return anchors + anchors + momentum + means

    def _cross_replica_snapshot(self) -> None:
        strategy = self._strategy
        own = strategy.run(
            lambda: [tf.identity(_tf_variable(v)) for v in self._variables + self._statistics]
        )
        for target, value in zip(self.sent, own, strict=True):
            strategy.extended.update(target, _assign, args=(value,), group=False)

    def _cross_replica_send(self) -> None:
        strategy = self._strategy
        new_values = strategy.run(self._replica_send)
        for target, value in zip(self.pending, new_values, strict=True):
            strategy.extended.update(target, _assign, args=(value,), group=False)

    def _replica_send(self) -> list[tf.Tensor]:
        count = len(self._variables)
        sent = [tf.convert_to_tensor(v) for v in self.sent]
        anchors, momentum, means = self._replica_outer(sent[:count], sent[count:])
        return anchors + momentum + means

    def _cross_replica_land(self) -> None:
        strategy = self._strategy
        new_values = strategy.run(self._replica_land)
        targets = [_tf_variable(v) for v in self._variables] + self.anchors + self.momentum
        targets += [_tf_variable(v) for v in self._statistics]
        for target, value in zip(targets, new_values, strict=True):
            strategy.extended.update(target, _assign, args=(value,), group=False)

    def _replica_land(self) -> list[tf.Tensor]:
        count, anchors = len(self._variables), len(self.anchors) + len(self.momentum)
        pending = [tf.convert_to_tensor(v) for v in self.pending]
        sent = [tf.convert_to_tensor(v) for v in self.sent]
        now = [tf.convert_to_tensor(_tf_variable(v)) for v in self._variables + self._statistics]
        new = pending[:count] + pending[anchors:]  # the anchors, then the statistics' means
        kept = [n + (w - s) for n, w, s in zip(new, now, sent, strict=True)]
        return kept[:count] + pending[:anchors] + kept[count:]

    def _replica_outer(
        self, weights: list[tf.Tensor], statistics: list[tf.Tensor]
    ) -> tuple[list[tf.Tensor], list[tf.Tensor], list[tf.Tensor]]:
        """The new anchors, outer momentum and statistics' means, from each replica's
        `weights` and `statistics` (one all-reduce)."""
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        anchors = [tf.convert_to_tensor(a) for a in self.anchors]
        deltas = [w - a for w, a in zip(weights, anchors, strict=True)]
        sent = [self._cast(d, v) for d, v in zip(deltas, self._variables, strict=True)]
        self.count.all_reduces = 1
        self.count.bytes = sum(
            int(s.shape.num_elements() or 0) * s.dtype.size for s in sent + statistics
        )
        self.count.traces.append(self.count.bytes)
        summed = context.all_reduce(tf.distribute.ReduceOp.SUM, sent + statistics)
        summed, summed_statistics = summed[: len(sent)], summed[len(sent) :]
        means = [tf.cast(s, d.dtype) / replicas for s, d in zip(summed, deltas, strict=True)]
        statistics = [s / replicas for s in summed_statistics]
        if self.settings.mode == "local_sgd":
            return [a + m for a, m in zip(anchors, means, strict=True)], [], statistics
        lr = self.settings.outer_learning_rate
        mu = self.settings.outer_momentum
        new_anchors, new_momentum = [], []
        for anchor, mean, buffer in zip(anchors, means, self.momentum, strict=True):
            gradient = -mean  # DiLoCo's outer gradient: anchor - mean(weights)
            buffer = mu * tf.convert_to_tensor(buffer) + gradient
            new_anchors.append(anchor - lr * (gradient + mu * buffer))
            new_momentum.append(buffer)
        return new_anchors, new_momentum, statistics

    def _cast(self, delta: tf.Tensor, variable: Any) -> tf.Tensor:
        if self.wire == tf.float32 or not delta.dtype.is_floating:
            return delta
        if self.residuals is not None:
            return self.residuals.feed(delta, variable, self.wire)
        return tf.cast(delta, self.wire)


class _Flight:
    """`function` run on a thread of its own; `join` waits for it and raises its error."""

    def __init__(self, function: Callable[[], Any]):
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(function,), name="kdist-average", daemon=True
        )
        self._thread.start()

    def _run(self, function: Callable[[], Any]) -> None:
        try:
            function()
        except BaseException as error:  # raised on the training thread by `join`
            self._error = error

    def join(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def _assign(variable: Any, value: tf.Tensor) -> Any:
    return variable.assign(value)


def _tf_variable(variable: Any) -> Any:
    return variable.value if isinstance(variable, keras.Variable) else variable


def _value(variable: Any) -> tf.Tensor:
    return tf.identity(tf.convert_to_tensor(_tf_variable(variable)))


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def running_statistics(model: Any) -> list[Any]:
    """The variables each replica updates apart besides the trained ones: the moving mean
    and variance of `model`'s BatchNormalization layers that train (a frozen one keeps
    them), in float32 or float64."""
    found: list[Any] = []
    for layer in flatten_layers(model):
        if isinstance(layer, keras.layers.BatchNormalization) and layer.trainable:
            found += [
                v
                for v in layer.non_trainable_variables
                if tf.as_dtype(v.dtype) in (tf.float32, tf.float64)
            ]
    return found


def _banks_of(states: Any) -> tf.Module:
    """A `ReplicaStates`' saved variables alone (its banks and their step)."""
    view = tf.Module(name="kdist_replica_states")
    view.banks, view.gathered_at = states.banks, states.gathered_at
    return view
