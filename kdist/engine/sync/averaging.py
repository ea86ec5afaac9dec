"""`WeightAverager`: the replicas' weights made one again (local SGD's mean, DiLoCo's step)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import flatten_layers
from kdist.config.sync import SyncSettings
from kdist.strategies.compression import ErrorFeedback

__all__ = ["SyncCount", "WeightAverager", "averager_of", "running_statistics"]


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
        self._average = tf.function(self._cross_replica_average)

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

    def restart_unless_synced(self, step: int) -> bool:
        """After a restore at optimizer step `step`: unless the checkpoint holds this
        averager's state (an average at `step`, or the last average before it and each
        replica's weights at `step`, which are given back), take the restored weights as
        the last average's and clear the outer momentum (a run resumed from an
        `every_step` checkpoint, or from a `local_sgd` one into `diloco`).

        Returns:
            Whether it started anew.
        """
        if int(self.synced_at.numpy()) == step:
            return False
        if 0 <= int(self.synced_at.numpy()) < step and self.replica_weights.spread(step):
            return False  # saved between two averages: each replica continues its own
        self.reset_anchors()
        for buffer in self.momentum:
            buffer.assign(tf.zeros_like(buffer))
        self.synced_at.assign(step)
        return True

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
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        # Read in replica context: each replica's own copies.
        weights = [tf.convert_to_tensor(_tf_variable(v)) for v in self._variables]
        anchors = [tf.convert_to_tensor(a) for a in self.anchors]
        deltas = [w - a for w, a in zip(weights, anchors, strict=True)]
        sent = [self._cast(d, v) for d, v in zip(deltas, self._variables, strict=True)]
        statistics = [tf.convert_to_tensor(_tf_variable(v)) for v in self._statistics]
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
            averaged = [a + m for a, m in zip(anchors, means, strict=True)]
            return averaged + averaged + statistics
        lr = self.settings.outer_learning_rate
        mu = self.settings.outer_momentum
        new_anchors, new_momentum = [], []
        for anchor, mean, buffer in zip(anchors, means, self.momentum, strict=True):
            gradient = -mean  # DiLoCo's outer gradient: anchor - mean(weights)
            buffer = mu * tf.convert_to_tensor(buffer) + gradient
            new_anchors.append(anchor - lr * (gradient + mu * buffer))
            new_momentum.append(buffer)
        return new_anchors + new_anchors + new_momentum + statistics

    def _cast(self, delta: tf.Tensor, variable: Any) -> tf.Tensor:
        if self.wire == tf.float32 or not delta.dtype.is_floating:
            return delta
        if self.residuals is not None:
            return self.residuals.feed(delta, variable, self.wire)
        return tf.cast(delta, self.wire)


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


def averager_of(optimizer: Any) -> WeightAverager | None:
    """The averager a `LocalSGDRunner` gave `optimizer` (kept across runners), or `None`."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    found = getattr(inner, "kdist_weight_average", None)
    return found if isinstance(found, WeightAverager) else None
