"""Row-sparse ("lazy") Adam and Adagrad: only the rows a batch looked up are updated.

Keras 3's Adam turns the `tf.IndexedSlices` gradient of an embedding table dense
(`ops.subtract(gradient, m)`), so every row of the table and of both moments is
rewritten at every step: the cost of a step grows with the table, not with the batch.
These subclasses keep Keras's update for dense gradients and, for an `IndexedSlices`
gradient, update the looked-up rows only, with scatter updates, moments included: the
semantics of TensorFlow Addons' `LazyAdam` (unmaintained, and not Keras 3). Under
parameter servers each update runs on the ps that holds the shard, as Keras's does.

Select them with `optimizer.sparse_updates=true` (kdist swaps Keras's Adam or Adagrad for
these), or name them directly: `optimizer._target_=kdist.modeling.lazy_optimizers.LazyAdam`.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import flatten_layers

__all__ = ["LazyAdagrad", "LazyAdam", "SparseLossScaleOptimizer", "is_lazy", "sparse_lookups"]


def _raw(variable: Any) -> Any:
    return variable.value if isinstance(variable, keras.Variable) else variable


def _deduplicate(gradient: tf.IndexedSlices, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    """The gradient's rows summed per unique index (an id looked up twice counts twice)."""
    unique, positions = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(
        tf.cast(gradient.values, dtype), positions, tf.shape(unique)[0]
    )
    return values, unique


def _rows(values: tf.Tensor, indices: tf.Tensor) -> tf.IndexedSlices:
    # No `dense_shape`: `tf.shape(variable)` would read the whole table (a dense read of a
    # variable that scatter ops update copies it: 70 ms for 1M x 32 rows).
    return tf.IndexedSlices(values, indices)


@keras.saving.register_keras_serializable(package="kdist")
class LazyAdam(keras.optimizers.Adam):
    """Adam that updates only the rows of a sparse gradient (TensorFlow Addons' `LazyAdam`).

    For an `IndexedSlices` gradient (an embedding lookup's), the first and second moments
    and the variable change only in the rows the batch looked up; the bias correction
    uses the global step as Adam's does. Other rows, moments included, stay as they are
    (dense Adam decays every row's moments at every step). Dense gradients get Keras's
    Adam update unchanged. Arguments are `keras.optimizers.Adam`'s.

    Example:

    ```python
    optimizer = kdist.modeling.lazy_optimizers.LazyAdam(learning_rate=1e-3)
    model.compile(optimizer=optimizer, loss="mse")
    ```
    """

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        if not isinstance(gradient, tf.IndexedSlices):
            super().update_step(gradient, variable, learning_rate)
            return
        dtype = variable.dtype
        values, indices = _deduplicate(gradient, dtype)
        lr = tf.cast(learning_rate, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        alpha = lr * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        m_rows = beta_1 * tf.gather(_raw(m), indices) + (1 - beta_1) * values
        v_rows = beta_2 * tf.gather(_raw(v), indices) + (1 - beta_2) * tf.square(values)
        self.assign(m, _rows(m_rows, indices))
        self.assign(v, _rows(v_rows, indices))
        if self.amsgrad:
            v_hat = self._velocity_hats[index]
            v_rows = tf.maximum(tf.gather(_raw(v_hat), indices), v_rows)
            self.assign(v_hat, _rows(v_rows, indices))
        step_rows = alpha * m_rows / (tf.sqrt(v_rows) + tf.cast(self.epsilon, dtype))
        self.assign_sub(variable, _rows(step_rows, indices))


@keras.saving.register_keras_serializable(package="kdist")
class LazyAdagrad(keras.optimizers.Adagrad):
    """Adagrad that updates only the rows of a sparse gradient.

    Adagrad's accumulator does not decay, so this is Keras's Adagrad, computed on the
    looked-up rows only (scatter updates) instead of on the whole table. Dense gradients
    get Keras's update unchanged. Arguments are `keras.optimizers.Adagrad`'s.
    """

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        if not isinstance(gradient, tf.IndexedSlices):
            super().update_step(gradient, variable, learning_rate)
            return
        dtype = variable.dtype
        values, indices = _deduplicate(gradient, dtype)
        lr = tf.cast(learning_rate, dtype)
        accumulator = self._accumulators[self._get_variable_index(variable)]
        rows = tf.gather(_raw(accumulator), indices) + tf.square(values)
        self.assign(accumulator, _rows(rows, indices))
        step_rows = lr * values / tf.sqrt(rows + tf.cast(self.epsilon, dtype))
        self.assign_sub(variable, _rows(step_rows, indices))


@keras.saving.register_keras_serializable(package="kdist")
class SparseLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras's `LossScaleOptimizer` that keeps `IndexedSlices` gradients sparse.

    Keras's unscales each gradient with `ops.divide` and checks it with `ops.isfinite`,
    both of which turn an embedding's sparse gradient into a dense table (and the lazy
    optimizer it wraps would then update every row). This one divides and checks the
    rows only. Arguments are `keras.optimizers.LossScaleOptimizer`'s.
    """

    def check_finite(self, grads: Any) -> Any:
        rows = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]
        return super().check_finite(rows)

    def _stateful_handle_finite_grads(self, grads: Any, trainable_variables: Any) -> None:
        if not any(isinstance(g, tf.IndexedSlices) for g in grads):
            super()._stateful_handle_finite_grads(grads, trainable_variables)
            return
        scale = self.dynamic_scale
        variables = trainable_variables or self._trainable_variables
        unscaled = []
        for g, v in zip(grads, variables, strict=True):
            if g is None or self._overwrite_variable_with_gradient(v):
                unscaled.append(g)
            elif isinstance(g, tf.IndexedSlices):
                values = g.values / tf.cast(scale, g.values.dtype)
                unscaled.append(tf.IndexedSlices(values, g.indices, g.dense_shape))
            else:
                unscaled.append(g / tf.cast(scale, g.dtype))
        self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)

        # What Keras's does next: grow the scale after `dynamic_growth_steps` good steps.
        def upscale() -> None:
            self.step_counter.assign(0)
            self.dynamic_scale.assign(keras.ops.multiply(self.dynamic_scale, 2.0))

        def increment() -> None:
            self.step_counter.assign_add(1)

        keras.ops.cond(
            keras.ops.equal(self.step_counter, self.dynamic_growth_steps - 1),
            upscale,
            increment,
        )


def is_lazy(optimizer: Any) -> bool:
    """Whether `optimizer` (or the one a `LossScaleOptimizer` wraps) updates rows lazily."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return isinstance(inner, (LazyAdam, LazyAdagrad))


def sparse_lookups(model: keras.Model) -> int:
    """Make the model's `keras.layers.Embedding` layers read only the rows they look up.

    Keras 3's `Embedding` reads the whole table (`convert_to_tensor`) and then gathers.
    Once an optimizer has scatter-updated a table, TensorFlow copies a variable's whole
    buffer on every such dense read (a variable used sparsely is read copy-on-read):
    128 MB a step for a 1M x 32 table, which costs more than the row-sparse update saves.
    `tf.nn.embedding_lookup` on the variable itself reads the rows only (`ResourceGather`;
    under parameter servers, a gather on each shard's ps). Layers of a subclass of
    `Embedding`, or quantized ones, keep their own `call`. Each layer's `call` is replaced
    on that instance only.

    Args:
        model: a built Keras model.

    Returns:
        The number of layers changed.
    """
    changed = 0
    for layer in flatten_layers(model):
        if type(layer) is not keras.layers.Embedding or layer.quantization_mode:
            continue
        layer.call = _row_reader(layer)
        changed += 1
    return changed


def _row_reader(layer: keras.layers.Embedding) -> Any:
    def call(inputs: Any) -> Any:
        if inputs.dtype not in (tf.int32, tf.int64):
            inputs = tf.cast(inputs, tf.int32)
        rows = tf.nn.embedding_lookup(layer.embeddings.value, inputs)
        return tf.cast(rows, layer.compute_dtype)

    return call
