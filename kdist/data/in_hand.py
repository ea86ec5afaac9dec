"""Data given to `Experiment.fit` in Python, as Keras's `fit(x, y, ...)` takes it.

`given_data` turns `fit`'s data arguments into a `kdist.data.Source` for kdist's input
pipeline, so data in hand is batched per replica, sharded and resumed step-exactly like
configured data:

- NumPy arrays (one, a dict or a tuple of them for several inputs; targets likewise, or
  none) become an `ArraySource`, the one behind `data=npz`: the same arrays give the same
  training, order and shuffle included. `validation_split` keeps the last fraction for
  validation before any shuffle, as Keras does.
- A `tf.data.Dataset` of single examples is batched per replica (and shuffled, like
  arrays); a batched one is taken as Keras takes it under `tf.distribute`: its batches
  are the global batch, split over the replicas, in its own order (kdist adds no shuffle).
- A `keras.utils.PyDataset` or a Python generator of batches is read through
  `tf.data.Dataset.from_generator` in this process: one input pipeline (so the
  replicas share one stream, and `PyDataset.on_epoch_end` runs once a pass). Strategies
  whose workers build their own input pipeline (multi-worker, parameter servers) cannot
  read it, and refuse it in one line.

Each problem is a `ConfigError` naming the argument (`x`, `y`, `batch_size`, ...) before
any training.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.source import ArraySource, Source

__all__ = ["DatasetSource", "Given", "check_inputs", "given", "given_data"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Given:
    """What `given_data` found: the source and what it implies for the run.

    Attributes:
        source: the examples, for the input pipeline.
        kind: `"arrays"`, `"dataset"`, `"batched dataset"`, `"PyDataset"` or `"generator"`.
        global_batch_size: the batch the data brings (a batched dataset's, a PyDataset's
            or a generator's first batch), or `None` to keep the configured one.
        shuffle: whether kdist shuffles the examples (arrays and unbatched datasets:
            `fit`'s `shuffle`; batches that come made: never, as in Keras).
        one_pipeline: the replicas read one input pipeline (a dataset or a Python
            stream, which two pipelines would read in two different orders).
    """

    source: Source
    kind: str
    global_batch_size: int | None
    shuffle: bool
    one_pipeline: bool

    def describe(self) -> str:
        sizes = f"{self.source.size('train')} training"
        validation = self.source.size("validation")
        if validation:
            sizes += f" and {validation} validation"
        return f"{self.kind} given to fit ({sizes} examples)"


class DatasetSource(Source):
    """A source over `tf.data.Dataset`s of single examples (data given to `fit`).

    Args:
        train: the training examples, unbatched, in their order.
        train_size: how many examples one pass over `train` holds.
        validation: the validation examples, unbatched. Defaults to `None`: none.
        validation_size: how many examples `validation` holds. Defaults to `0`.
        one_pipeline: the replicas must share one input pipeline (see `Given`).
            Defaults to `True`.
        classes: how to find the number of classes when a model built from the config
            asks. Defaults to `None`: the largest integer target of one pass + 1 (or
            the size of one-hot rows).
    """

    def __init__(
        self,
        *,
        train: tf.data.Dataset,
        train_size: int,
        validation: tf.data.Dataset | None = None,
        validation_size: int = 0,
        one_pipeline: bool = True,
        classes: Callable[[], int] | None = None,
    ):
        self._datasets = {"train": train, "validation": validation}
        self._sizes = {"train": int(train_size), "validation": int(validation_size)}
        self.one_pipeline = one_pipeline
        x, _, _ = keras.utils.unpack_x_y_sample_weight(train.element_spec)
        self.input_shape = tf.nest.map_structure(lambda spec: tuple(spec.shape), x)
        self._num_classes: int | None = None
        self._classes = classes or (lambda: _count_classes(train))

    @property
    def num_classes(self) -> int:  # type: ignore[override]  # Source's attribute, read lazily
        """Classes of integer (or one-hot) targets; read from the data once, when asked."""
        if self._num_classes is None:
            self._num_classes = self._classes()
        return self._num_classes

    def size(self, split: str) -> int:
        return self._sizes[split]

    def dataset(self, split: str) -> tf.data.Dataset:
        ds = self._datasets[split]
        if ds is None:
            return self._datasets["train"].take(0)
        return ds


def _count_classes(ds: tf.data.Dataset) -> int:
    _, y, _ = keras.utils.unpack_x_y_sample_weight(ds.element_spec)
    if not isinstance(y, tf.TensorSpec):
        return 0
    if y.shape.rank and y.shape[-1] and y.shape[-1] > 1:
        return int(y.shape[-1])  # one-hot rows
    if not y.dtype.is_integer:
        return 1

    def largest(top: tf.Tensor, example: Any) -> tf.Tensor:
        _, label, _ = keras.utils.unpack_x_y_sample_weight(example)
        return tf.maximum(top, tf.cast(tf.reduce_max(label), tf.int64))

    return int(ds.reduce(tf.constant(-1, tf.int64), largest)) + 1


def given(**description: Any) -> Source:
    """What `data.source` says in the config of a run trained on data given to `fit`.

    That data is not in the run folder, so a later command cannot read it again.

    Raises:
        ConfigError: naming `data.source`, always.
    """
    raise ConfigError(
        "data.source",
        f"the run trained on {description.get('kind', 'data')} given to fit() in Python, "
        "which the run folder does not hold",
        hint="give the data again (exp.predict(x=...), exp.fit(x, ...)), or set data=... "
        "to a source that reads it (e.g. data=npz data.source.path=FILE)",
    )


def _strategy_kind(strategy: tf.distribute.Strategy) -> str | None:
    """The name of a strategy whose workers build their own input pipelines, else `None`."""
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        return "parameter_server"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multi_worker_mirrored"
    return None


def _is_stream(x: Any) -> bool:
    return inspect.isgenerator(x) or (
        isinstance(x, Iterator) and not isinstance(x, (np.ndarray, tf.data.Dataset))
    )


def _as_arrays(value: Any, name: str) -> Any:
    """A NumPy array (or a dict/tuple of them), floats as float32 (Keras's floatx)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {str(k): _as_arrays(v, f"{name}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]):
        shapes = {np.shape(v) for v in value}
        if len(shapes) > 1 or isinstance(value, tuple):
            return tuple(_as_arrays(v, f"{name}[{i}]") for i, v in enumerate(value))
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise ConfigError(name, f"cannot be read as a NumPy array ({error})") from None
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
    return array


def _length(structure: Any) -> int:
    return len(tf.nest.flatten(structure)[0])


def _slice(structure: Any, part: slice) -> Any:
    return None if structure is None else tf.nest.map_structure(lambda a: a[part], structure)


def _refuse(name: str, value: Any, kind: str, hint: str) -> None:
    if value is not None:
        raise ConfigError(name, f"must not be given with a {kind}", hint=hint)


def given_data(
    x: Any,
    y: Any = None,
    *,
    validation_data: Any = None,
    validation_split: float = 0.0,
    sample_weight: Any = None,
    batch_size: int | None = None,
    steps_per_epoch: int | None = None,
    shuffle: bool | None = None,
    strategy: tf.distribute.Strategy,
) -> Given:
    """The source for `fit(x, y, ...)`'s data, checked against the strategy.

    Args:
        x: NumPy arrays (or a dict/tuple of them), a `tf.data.Dataset`, a
            `keras.utils.PyDataset` or a Python generator of batches.
        y: targets, with arrays only. Defaults to `None`.
        validation_data: `(x_val, y_val[, sample_weight_val])` arrays, a
            `tf.data.Dataset` or a `PyDataset` (read once into arrays). Defaults to `None`.
        validation_split: the last fraction of the arrays kept for validation (before
            any shuffle), as in Keras. Defaults to `0.0`.
        sample_weight: per-example weights, with arrays only. Defaults to `None`.
        batch_size: the global batch of arrays or an unbatched dataset (made data
            brings its own). Defaults to `None`.
        steps_per_epoch: steps per epoch; required for a generator. Defaults to `None`.
        shuffle: shuffle arrays and unbatched datasets. Defaults to `None`: `True`.
        strategy: the run's strategy.

    Returns:
        A `Given`.

    Raises:
        ConfigError: naming the argument, for data that does not fit together or that
            the strategy cannot read.
    """
    if isinstance(x, tf.data.Dataset):
        given_kind = "dataset"
    elif isinstance(x, keras.utils.PyDataset):
        given_kind = "PyDataset"
    elif _is_stream(x):
        given_kind = "generator"
    else:
        given_kind = "arrays"
    if given_kind != "arrays":
        what = "tf.data.Dataset" if given_kind == "dataset" else given_kind
        hint = f"a {what}'s elements carry (x, y[, sample_weight]), as in Keras's fit"
        _refuse("y", y, what, hint)
        _refuse("sample_weight", sample_weight, what, hint)
        if validation_split:
            raise ConfigError(
                "validation_split",
                f"works with NumPy arrays only, not a {what} (as in Keras)",
                value=validation_split,
                hint="pass validation_data",
            )
    if given_kind in ("PyDataset", "generator"):
        refused = _strategy_kind(strategy)
        if refused is not None:
            raise ConfigError(
                "x",
                f"a {given_kind} runs in this Python process, but under {refused} every "
                "worker builds its own input pipeline",
                hint="pass NumPy arrays or a tf.data.Dataset, or a data.source that each "
                "worker reads (e.g. data=npz data.source.path=FILE)",
            )
    if given_kind == "dataset" and isinstance(strategy, tf.distribute.ParameterServerStrategy):
        raise ConfigError(
            "x",
            "a tf.data.Dataset cannot feed parameter_server: each worker builds its input "
            "pipeline from a function, which cannot hold a dataset made here",
            hint="pass NumPy arrays, or a data.source (e.g. data=npz data.source.path=FILE)",
        )
    validation = _validation(validation_data)

    if given_kind == "arrays":
        return _arrays(
            x,
            y,
            sample_weight=sample_weight,
            validation=validation,
            validation_split=validation_split,
            shuffle=True if shuffle is None else bool(shuffle),
        )
    if given_kind == "dataset":
        return _dataset(
            x,
            validation=validation,
            batch_size=batch_size,
            steps_per_epoch=steps_per_epoch,
            shuffle=True if shuffle is None else bool(shuffle),
        )
    if batch_size is not None:
        raise ConfigError(
            "batch_size",
            f"must not be given with a {given_kind}: its batches are the global batch",
            value=batch_size,
        )
    if given_kind == "PyDataset":
        return _pydataset(x, validation=validation)
    return _generator(x, validation=validation, steps_per_epoch=steps_per_epoch)


# -- validation ----------------------------------------------------------------------------


def _validation(validation_data: Any) -> tuple[Any, ...] | tf.data.Dataset | None:
    """`validation_data` as arrays `(x, y[, w])`, or an unbatched `tf.data.Dataset`."""
    if validation_data is None:
        return None
    if isinstance(validation_data, tf.data.Dataset):
        ds = validation_data
        return ds.unbatch() if _is_batched(ds) else ds
    if isinstance(validation_data, keras.utils.PyDataset):
        batches = [_as_tuple(validation_data[i]) for i in range(len(validation_data))]
        return tuple(
            _as_arrays(np.concatenate(parts), "validation_data")
            for parts in zip(*batches, strict=True)
        )
    if _is_stream(validation_data):
        raise ConfigError(
            "validation_data",
            "is a generator, which validation would read once and then find empty",
            hint="pass arrays, a tf.data.Dataset or a keras.utils.PyDataset",
        )
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
        raise ConfigError(
            "validation_data",
            "must be (x_val, y_val) or (x_val, y_val, sample_weight_val), a "
            "tf.data.Dataset or a keras.utils.PyDataset",
            value=type(validation_data).__name__,
        )
    return tuple(
        _as_arrays(part, f"validation_data[{i}]") for i, part in enumerate(validation_data)
    )


def _as_tuple(batch: Any) -> tuple[Any, ...]:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def _validation_dataset(validation: Any) -> tuple[tf.data.Dataset | None, int]:
    if validation is None:
        return None, 0
    if isinstance(validation, tf.data.Dataset):
        return validation, _count(validation, "validation_data")
    parts = tuple(p for p in validation if p is not None)
    return tf.data.Dataset.from_tensor_slices(parts), _length(parts[0])


# -- arrays -----------------------------------------------------------------------------


def _arrays(
    x: Any,
    y: Any,
    *,
    sample_weight: Any,
    validation: Any,
    validation_split: float,
    shuffle: bool,
) -> Given:
    x, y = _as_arrays(x, "x"), _as_arrays(y, "y")
    weights = _as_arrays(sample_weight, "sample_weight")
    if weights is not None and y is None:
        raise ConfigError("sample_weight", "needs targets: give y too")
    if not 0.0 <= float(validation_split) < 1.0:
        raise ConfigError(
            "validation_split", "must be in [0, 1)", value=validation_split, hint="e.g. 0.2"
        )
    count = _length(x)
    for name, part in (("y", y), ("sample_weight", weights)):
        if part is not None and _length(part) != count:
            raise ConfigError(
                name,
                f"has {_length(part)} examples, x has {count}",
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
        validation = (_slice(x, slice(at, None)), _slice(y, slice(at, None)))
        if weights is not None:
            validation += (_slice(weights, slice(at, None)),)
        x, y, weights = (_slice(p, slice(None, at)) for p in (x, y, weights))
    if validation is None:
        validation = (_slice(x, slice(0, 0)), _slice(y, slice(0, 0)))
    x_val, y_val = validation[0], validation[1]
    if (y_val is None) != (y is None):
        raise ConfigError(
            "validation_data",
            "has targets while y is None" if y is None else "has no targets while y has",
        )
    w_val = validation[2] if len(validation) > 2 else None
    if w_val is not None and weights is None:
        weights = np.ones(_length(x), np.float32)
    if weights is not None and w_val is None:
        w_val = np.ones(_length(x_val), np.float32)
    try:
        source = ArraySource(
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


# -- datasets ---------------------------------------------------------------------------


_BATCHING = ("BatchDataset", "PaddedBatch", "RebatchDataset", "DenseToRagged")


def _is_batched(ds: tf.data.Dataset) -> bool:
    """Whether `ds`'s elements are batches: the nearest batch or unbatch op decides.

    Without either, a leading dimension of unknown size in every element (what
    `batch` without `drop_remainder` gives) is taken for a batch.
    """
    seen: list[Any] = [ds]
    while seen:
        node = seen.pop()
        name = type(node).__name__
        if "Unbatch" in name:
            return False
        if any(marker in name for marker in _BATCHING):
            return True
        inputs = getattr(node, "_input_dataset", None)
        if isinstance(inputs, tf.data.Dataset):
            seen.append(inputs)
        seen.extend(getattr(node, "_input_datasets", None) or [])
    shapes = [s.shape for s in tf.nest.flatten(ds.element_spec) if hasattr(s, "shape")]
    return bool(shapes) and all(s.rank and s[0] is None for s in shapes)


def _count(ds: tf.data.Dataset, name: str) -> int:
    """Examples in one pass over an unbatched `ds` (one pass when TensorFlow cannot tell)."""
    cardinality = int(ds.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise ConfigError(
            name,
            "is a dataset without end (repeat())",
            hint="pass steps_per_epoch, or drop the repeat(): kdist repeats it"
            if name == "x"
            else "drop the repeat(): validation reads it once",
        )
    if cardinality >= 0:
        return cardinality
    log.info("%s: counting the dataset's examples (one pass; steps_per_epoch skips it)", name)
    return int(ds.reduce(tf.constant(0, tf.int64), lambda n, *_: n + 1))


def _batch_size(first: Any, name: str) -> int:
    leaves = [np.shape(a) for a in tf.nest.flatten(first)]
    if not leaves or not leaves[0]:
        raise ConfigError(name, "yields elements without a batch axis")
    return int(leaves[0][0])


def _dataset(
    ds: tf.data.Dataset,
    *,
    validation: Any,
    batch_size: int | None,
    steps_per_epoch: int | None,
    shuffle: bool,
) -> Given:
    batched = _is_batched(ds)
    global_batch = batch_size
    if batched:
        if batch_size is not None:
            raise ConfigError(
                "batch_size",
                "must not be given with a batched tf.data.Dataset: its batches are the "
                "global batch, split over the replicas (as in Keras)",
                value=batch_size,
                hint="leave it out, or pass the dataset unbatched",
            )
        first = next(iter(ds.take(1)), None)
        if first is None:
            raise ConfigError("x", "is an empty tf.data.Dataset")
        global_batch = _batch_size(first, "x")
        ds = ds.unbatch()
    if steps_per_epoch:
        size = int(steps_per_epoch) * int(global_batch or 1)
        if int(ds.cardinality()) >= 0:
            size = min(size, int(ds.cardinality()))
    else:
        size = _count(ds, "x")
    if size < 1:
        raise ConfigError("x", "is an empty tf.data.Dataset")
    val_ds, val_size = _validation_dataset(validation)
    source = DatasetSource(train=ds, train_size=size, validation=val_ds, validation_size=val_size)
    kind = "batched dataset" if batched else "dataset"
    return Given(source, kind, global_batch, shuffle and not batched, one_pipeline=True)


# -- Python streams ---------------------------------------------------------------------


def _signature(batch: tuple[Any, ...]) -> Any:
    def spec(value: Any) -> tf.TensorSpec:
        array = np.asarray(value)
        dtype = tf.float32 if np.issubdtype(array.dtype, np.floating) else array.dtype
        return tf.TensorSpec((None, *array.shape[1:]), tf.as_dtype(dtype))

    return tf.nest.map_structure(spec, batch)


def _structured(batch: Any) -> tuple[Any, ...]:
    """A batch as `from_generator` yields it: a tuple, dicts kept, lists made tuples."""
    return tuple(tuple(p) if isinstance(p, list) else p for p in _as_tuple(batch))


def _stream_dataset(make: Callable[[], Iterator[Any]], first: tuple[Any, ...]) -> tf.data.Dataset:
    signature = _signature(first)

    def generate() -> Iterator[Any]:
        for batch in make():
            yield tf.nest.map_structure(
                lambda v, s: np.asarray(v, s.dtype.as_numpy_dtype), _structured(batch), signature
            )

    return tf.data.Dataset.from_generator(generate, output_signature=signature).unbatch()


def _pydataset(data: keras.utils.PyDataset, *, validation: Any) -> Given:
    batches = len(data)
    if not batches:
        raise ConfigError("x", "is an empty keras.utils.PyDataset (len 0)")
    first = _structured(data[0])
    batch = _batch_size(first, "x")
    size = (batches - 1) * batch + _batch_size(_structured(data[batches - 1]), "x")

    def one_pass() -> Iterator[Any]:
        for index in range(batches):
            yield data[index]
        data.on_epoch_end()

    def classes() -> int:
        # The batches' targets, read without a pass of the stream (no on_epoch_end).
        targets = [_as_tuple(data[i])[1:2] for i in range(batches)]
        if not all(targets):
            return 0
        labels = np.concatenate([np.asarray(t[0]) for t in targets])
        return _count_classes(tf.data.Dataset.from_tensor_slices((labels, labels)))

    val_ds, val_size = _validation_dataset(validation)
    source = DatasetSource(
        train=_stream_dataset(one_pass, first),
        train_size=size,
        validation=val_ds,
        validation_size=val_size,
        classes=classes,
    )
    return Given(source, "PyDataset", batch, False, one_pipeline=True)


def _generator(stream: Iterator[Any], *, validation: Any, steps_per_epoch: int | None) -> Given:
    if not steps_per_epoch:
        raise ConfigError(
            "steps_per_epoch",
            "is needed with a generator: it has no length to make epochs of",
            hint="pass steps_per_epoch=N (the generator must yield epochs x N batches)",
        )
    try:
        first = _structured(next(stream))
    except StopIteration:
        raise ConfigError("x", "is a generator that yields nothing") from None
    batch = _batch_size(first, "x")
    rest = itertools.chain([first], stream)
    taken: list[bool] = []

    def once() -> Iterator[Any]:
        # A generator runs once: a second pass (a repeat) finds it empty, as in Keras.
        if taken:
            return iter(())
        taken.append(True)
        return rest

    def classes() -> int:
        # A stream has no end to read to: its first batch tells.
        count = _count_classes(tf.data.Dataset.from_tensor_slices(first))
        log.info("x: %d classes, from the generator's first batch", count)
        return count

    val_ds, val_size = _validation_dataset(validation)
    source = DatasetSource(
        train=_stream_dataset(once, first),
        train_size=int(steps_per_epoch) * batch,
        validation=val_ds,
        validation_size=val_size,
        classes=classes,
    )
    return Given(source, "generator", batch, False, one_pipeline=True)


# -- the model meets the data ---------------------------------------------------------------


def _describe(structure: Any, skip: int) -> str:
    if isinstance(structure, Mapping):
        inner = ", ".join(f"{k}: {_describe(v, skip)}" for k, v in structure.items())
        return "{" + inner + "}"
    if isinstance(structure, (tuple, list)):
        return "(" + ", ".join(_describe(v, skip) for v in structure) + ")"
    shape = getattr(structure, "shape", None)
    return str(tuple(shape)[skip:]) if shape is not None else type(structure).__name__


def check_inputs(model: keras.Model, element_spec: Any, *, key: str = "x") -> None:
    """Check that examples of `element_spec` (x, y, w; unbatched) fit the model.

    Args:
        model: the compiled model.
        element_spec: one example's spec, `(x,)`, `(x, y)` or `(x, y, sample_weight)`.
        key: what to name in an error about the features. Defaults to `"x"`.

    Raises:
        ConfigError: naming `key` when the features' structure (dict keys, number of
            inputs) or shapes do not match the model's inputs, or `y` when the model's
            compiled loss needs targets that the data does not carry.
    """
    x, y, _ = keras.utils.unpack_x_y_sample_weight(element_spec)
    if y is None and key == "x" and getattr(model, "_compile_loss", None) is not None:
        raise ConfigError(
            "y",
            f"is missing: {model.name} is compiled with a loss, which needs targets",
            hint="pass y (or yield (x, y) from the dataset)",
        )
    inputs = getattr(model, "_inputs_struct", None)
    if inputs is None:
        if model.built:
            _check_call(model, x, key)
        return  # unbuilt: built from this data
    given_desc, wanted = _describe(x, 0), _describe(inputs, 1)
    problem = None
    if isinstance(inputs, Mapping) != isinstance(x, Mapping):
        problem = "has another structure than"
    elif isinstance(inputs, Mapping) and set(inputs) != set(x):
        problem = "has other input names than"
    elif len(tf.nest.flatten(inputs)) != len(tf.nest.flatten(x)):
        problem = "has another number of inputs than"
    else:
        wanted_leaves = tf.nest.flatten(inputs)
        given_leaves = tf.nest.flatten(x)
        if isinstance(inputs, Mapping):
            wanted_leaves = [inputs[k] for k in sorted(inputs)]
            given_leaves = [x[k] for k in sorted(x)]
        for want, have in zip(wanted_leaves, given_leaves, strict=True):
            a, b = tuple(want.shape)[1:], tuple(have.shape)
            if len(a) != len(b) or any(i and j and i != j for i, j in zip(a, b, strict=True)):
                problem = "does not have the shape of"
                break
    if problem is not None:
        raise ConfigError(
            key,
            f"{problem} the model's inputs: the data gives {given_desc}, "
            f"{model.name} takes {wanted}",
            hint="give data shaped as the model's inputs (or build the model for this data)",
        )


def _check_call(model: keras.Model, x: Any, key: str) -> None:
    """A built subclassed model called on a symbolic batch of `x`: its own shape checks."""
    from keras.src import backend

    batch = tf.nest.map_structure(
        lambda spec: keras.KerasTensor((None, *spec.shape), dtype=spec.dtype.name), x
    )
    try:
        backend.compute_output_spec(model, batch, training=False)
    except ValueError as error:
        first = str(error).strip().splitlines()[0]
        raise ConfigError(
            key,
            f"does not fit {model.name}, built for other inputs: {first}",
            hint="give data shaped as the model's inputs",
        ) from None
    except Exception:  # e.g. no `call` (keras.io's VAE, GAN): training tells
        return
