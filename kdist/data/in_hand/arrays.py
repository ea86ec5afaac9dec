"""NumPy arrays given to `fit`: checked, split for validation, and a `FitArrays` source.

As Keras's `ArrayDataAdapter`: `validation_split` keeps the last fraction for validation
before any shuffle (`train_validation_split`), `class_weight` becomes per-example sample
weights (`class_weight_to_sample_weights`), and every pass over the data is
`ceil(examples / batch_size)` steps, the last one a partial batch. The one difference:
the order of a shuffled pass is drawn from `runtime.seed` and the pass number, so a
resumed run reads the same batches from any step.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.compat.keras_private import class_weight_to_sample_weights
from kdist.config.compile_rules import check_class_weight
from kdist.config.errors import ConfigError
from kdist.data.checks import check_finite
from kdist.data.in_hand.source import Given
from kdist.data.source import ArraySource

log = logging.getLogger(__name__)

# Set while Keras's own NaN handling was asked for (`non_finite_allowed`).
_NON_FINITE_ALLOWED = contextvars.ContextVar("non_finite_allowed", default=False)


@contextlib.contextmanager
def non_finite_allowed() -> Iterator[None]:
    """Read NaN or infinite values with a warning instead of refusing them.

    For a `fit` given Keras's `TerminateOnNaN`: Keras trains on such values, and the
    callback, not kdist's refusal, is to act on the loss they give.
    """
    token = _NON_FINITE_ALLOWED.set(True)
    try:
        yield
    finally:
        _NON_FINITE_ALLOWED.reset(token)


__all__ = [
    "FitArrays",
    "as_arrays",
    "as_tuple",
    "from_arrays",
    "length",
    "non_finite_allowed",
    "take",
]


class FitArrays(ArraySource):
    """Arrays given to `fit`: whole global batches, each pass ending with its partial batch.

    Args:
        partial: keep each pass's partial last batch (`False` under parameter servers,
            whose workers take steps in any order: full batches only).
        **arrays: as `ArraySource`.
    """

    one_pipeline = False

    def __init__(self, *, partial: bool = True, **arrays: Any):
        super().__init__(**arrays)
        self.partial_batches = partial

    def steps_per_pass(self, global_batch_size: int) -> int:
        """Steps in one pass over the training examples, the partial batch included."""
        return -(-self.size("train") // int(global_batch_size))

    def train_batches(
        self, global_batch_size: int, *, seed: int, shuffle: bool, first_step: int
    ) -> tf.data.Dataset:
        """The global batches of every step from `first_step` on, without end.

        Pass `p` reads the examples in the order `stateless_shuffle(range(n), [seed, p])`
        (in order without `shuffle`), `global_batch_size` at a time, the last batch of
        the pass partial; step `s` is batch `s % steps` of pass `s // steps`, whatever
        step the stream starts at.
        """
        examples, batch = self.size("train"), int(global_batch_size)
        steps = self.steps_per_pass(batch)
        first_pass, first_in_pass = divmod(int(first_step), steps)
        seed64 = tf.constant(int(seed) % (2**63), tf.int64)
        # Keras's array adapter gives its batches a static size when no pass ends with a
        # partial batch (`ArrayDataAdapter.get_tf_dataset`), and the step is traced with it:
        # a static batch changes the step's graph (a gradient's scaling folded, a repeat's
        # gradient as a reshape), and with it the float rounding. Kept the same here.
        whole = batch if examples % batch == 0 else None

        def pass_indices(number: tf.Tensor) -> tf.data.Dataset:
            order = tf.range(examples, dtype=tf.int64)
            if shuffle:
                order = tf.random.experimental.stateless_shuffle(
                    order, seed=tf.stack([seed64, number])
                )
            start = tf.where(number == first_pass, tf.constant(first_in_pass, tf.int64), 0)

            def rows(k: tf.Tensor) -> tf.Tensor:
                part = order[k * batch : tf.minimum((k + 1) * batch, examples)]
                return part if whole is None else tf.ensure_shape(part, [whole])

            return tf.data.Dataset.range(start, steps).map(rows)

        indices = tf.data.Dataset.range(first_pass, 2**62).flat_map(pass_indices)
        data = tf.data.Dataset.from_tensors(self.arrays("train")).repeat()

        def gather(index: tf.Tensor, arrays: Any) -> Any:
            return tf.nest.map_structure(
                lambda a: None if a is None else tf.gather(a, index), arrays
            )

        return tf.data.Dataset.zip((indices, data)).map(gather)


def as_arrays(value: Any, name: str) -> Any:
    """A NumPy array (or a dict/tuple of them), floats as float32 (Keras's floatx)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {str(k): as_arrays(v, f"{name}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)) and any(v is None for v in value):
        # An optional input left out (Keras's `Input(optional=True)`), or a required one
        # the model then refuses as Keras's does ("... is not optional").
        return tuple(as_arrays(v, f"{name}[{i}]") for i, v in enumerate(value))
    if isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]):
        shapes = {np.shape(v) for v in value}
        # A list of arrays is several inputs (or outputs), as Keras reads it; a nested
        # list of numbers is one array.
        arrays = all(hasattr(v, "shape") or isinstance(v, Mapping) for v in value)
        if arrays or len(shapes) > 1 or isinstance(value, tuple):
            return tuple(as_arrays(v, f"{name}[{i}]") for i, v in enumerate(value))
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise ConfigError(name, f"cannot be read as a NumPy array ({error})") from None
    if array.dtype == object and array.size:
        # Text from pandas (str) or a tf.string tensor (bytes), as TensorFlow reads it.
        for kind in (str, bytes):
            if all(isinstance(v, kind) for v in array.flat):
                array = array.astype(kind)
                break
    if array.dtype == object:
        raise ConfigError(
            name,
            "holds Python objects, not numbers or strings",
            hint="pass a NumPy array of one dtype (or a dict of them)",
        )
    if array.ndim == 0:
        raise ConfigError(name, "is a scalar: it needs examples on its first axis")
    if np.issubdtype(array.dtype, np.floating) and array.dtype != np.float32:
        array = array.astype(np.float32)
    try:
        check_finite(name, array, name="values")
    except ConfigError as error:
        if not _NON_FINITE_ALLOWED.get():
            raise
        log.warning("%s (read as given: a TerminateOnNaN is among the callbacks)", error)
    return array


def length(structure: Any) -> int:
    """The examples in `structure`: the length of its first array (`None`s, optional
    inputs left out, have none; a structure of only `None`s has 0)."""
    return next((len(a) for a in tf.nest.flatten(structure) if a is not None), 0)


def take(structure: Any, part: Any) -> Any:
    """`structure` with each array indexed by `part` (a slice or indices); `None`s kept."""
    if structure is None:
        return None
    return tf.nest.map_structure(lambda a: None if a is None else a[part], structure)


def as_tuple(batch: Any) -> tuple[Any, ...]:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def _class_weights(y: Any, class_weight: Any) -> np.ndarray:
    """`class_weight` as per-example weights of `y`, by Keras's rule for arrays.

    Raises:
        ConfigError: naming `class_weight` for several outputs or a class the labels
            cannot hold, or `y` for negative class ids.
    """
    weights = check_class_weight(class_weight)
    assert weights is not None
    if not isinstance(y, np.ndarray):
        raise ConfigError(
            "class_weight",
            "is only supported for models with a single output (as in Keras)",
            hint="pass sample_weight, one array per output",
        )
    one_hot = y.ndim > 1 and y.shape[-1] != 1
    if one_hot:
        classes = int(y.shape[-1])
    elif np.issubdtype(y.dtype, np.floating) and y.size and y.min() >= 0 and y.max() <= 1:
        classes = 2  # binary labels
    else:
        labels = np.round(y.reshape(-1)).astype(np.int64)
        if labels.size and labels.min() < 0:
            raise ConfigError(
                "y",
                f"holds the class id {int(labels.min())}: class ids are 0 or more",
                hint="give class ids 0..N-1",
            )
        classes = 0
    beyond = sorted(k for k in weights if classes and k >= classes)
    if beyond:
        holder = f"one-hot rows of {classes}" if one_hot else "binary labels"
        raise ConfigError(
            "class_weight",
            f"names class {beyond[0]}, which {holder} cannot hold (classes 0..{classes - 1})",
            value=dict(class_weight),
        )
    return np.asarray(class_weight_to_sample_weights(y, weights), np.float32)


def from_arrays(
    x: Any,
    y: Any,
    *,
    sample_weight: Any,
    validation: Any,
    validation_split: float,
    shuffle: bool,
    class_weight: Any = None,
    partial: bool = True,
) -> Given:
    x, y = as_arrays(x, "x"), as_arrays(y, "y")
    weights = as_arrays(sample_weight, "sample_weight")
    if weights is not None and y is None:
        raise ConfigError("sample_weight", "needs targets: give y too")
    if class_weight is not None and weights is not None:
        raise ConfigError(
            "class_weight",
            "cannot be given with sample_weight (as in Keras)",
            hint="fold the class weights into sample_weight",
        )
    if class_weight is not None and y is None:
        raise ConfigError("class_weight", "needs targets: give y too")
    if not 0.0 <= float(validation_split) < 1.0:
        raise ConfigError(
            "validation_split", "must be in [0, 1)", value=validation_split, hint="e.g. 0.2"
        )
    count = length(x) or length(y)  # x of `None`s only: the model refuses them as Keras's
    if count < 1:
        raise ConfigError("x", "has no examples (0 rows)", hint="give at least one example")
    for name, part in (("y", y), ("sample_weight", weights)):
        if part is not None and length(part) != count:
            raise ConfigError(
                name,
                f"has {length(part)} examples, x has {count}",
                hint="give one row per example",
            )
    if validation is not None and isinstance(validation, tf.data.Dataset):
        raise ConfigError(
            "validation_data",
            "is a tf.data.Dataset while x is NumPy arrays",
            hint="pass (x_val, y_val) arrays with arrays",
        )
    if validation is None and validation_split:
        # Keras's rule: the last fraction, before shuffling.
        at = int(np.floor(count * (1.0 - float(validation_split))))
        if at < 1 or at == count:
            raise ConfigError(
                "validation_split",
                f"leaves no {'training' if at < 1 else 'validation'} example of {count}",
                value=validation_split,
            )
        validation = (take(x, slice(at, None)), take(y, slice(at, None)))
        if weights is not None:
            validation += (take(weights, slice(at, None)),)
        x, y, weights = (take(p, slice(None, at)) for p in (x, y, weights))
    if class_weight is not None:
        weights = _class_weights(y, class_weight)
    if validation is None:
        validation = (take(x, slice(0, 0)), take(y, slice(0, 0)))
    x_val, y_val = validation[0], validation[1]
    if (y_val is None) != (y is None):
        raise ConfigError(
            "validation_data",
            "has targets while y is None" if y is None else "has no targets while y has",
        )
    w_val = validation[2] if len(validation) > 2 else None
    if w_val is not None and weights is None:
        weights = np.ones(length(x), np.float32)
    if weights is not None and w_val is None:
        w_val = np.ones(length(x_val), np.float32)
    try:
        source = FitArrays(
            partial=partial,
            x_train=x,
            y_train=y,
            x_validation=x_val,
            y_validation=y_val,
            w_train=weights,
            w_validation=w_val,
        )
    except ValueError as error:
        raise ConfigError("validation_data", str(error)) from None
    return Given(source, "arrays", None, shuffle, one_pipeline=False)
