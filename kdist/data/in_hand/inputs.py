"""Whether data given to `fit` fits the model: its inputs' structure and shapes, targets."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from kdist.compat import UpstreamMoved
from kdist.compat.keras_private import (
    compile_loss,
    compute_output_spec,
    inputs_struct,
    outputs_struct,
)
from kdist.config.errors import ConfigError

__all__ = ["check_inputs"]


def _describe(structure: Any, skip: int) -> str:
    if isinstance(structure, Mapping):
        inner = ", ".join(f"{k}: {_describe(v, skip)}" for k, v in structure.items())
        return "{" + inner + "}"
    if isinstance(structure, (tuple, list)):
        return "(" + ", ".join(_describe(v, skip) for v in structure) + ")"
    shape = getattr(structure, "shape", None)
    return str(tuple(shape)[skip:]) if shape is not None else type(structure).__name__


def check_inputs(
    model: keras.Model, element_spec: Any, *, key: str = "x", needs_targets: bool = True
) -> None:
    """Check that examples of `element_spec` (x, y, w; unbatched) fit the model.

    Args:
        model: the compiled model.
        element_spec: one example's spec, `(x,)`, `(x, y)` or `(x, y, sample_weight)`.
        key: what to name in an error about the features. Defaults to `"x"`.
        needs_targets: whether a compiled loss needs targets here (not for
            `predict`). Defaults to `True`.

    Raises:
        ConfigError: naming `key` when the features' structure (dict keys, number of
            inputs) or shapes do not match the model's inputs, or `y` when the model's
            compiled loss needs targets that the data does not carry.
    """
    x, y, _ = keras.utils.unpack_x_y_sample_weight(element_spec)
    # A model with its own `train_step` (keras.io's diffusion model) uses its compiled
    # loss on targets it makes itself: `fit` asks for no `y` then.
    own_step = type(model).train_step is not keras.Model.train_step
    if (
        y is None
        and needs_targets
        and key == "x"
        and compile_loss(model) is not None
        and not own_step
    ):
        raise ConfigError(
            "y",
            f"is missing: {model.name} is compiled with a loss, which needs targets",
            hint="pass y (or yield (x, y) from the dataset)",
        )
    _check_target_keys(model, y)
    _check_dtypes(model, x, key)
    inputs = inputs_struct(model)
    if inputs is None:
        if model.built:
            _check_call(model, x, key)
        return  # unbuilt: built from this data
    given_desc, wanted = _describe(x, 0), _describe(inputs, 1)
    x = _by_input_names(model, inputs, x, key)
    problem = None
    if isinstance(inputs, Mapping) and isinstance(x, Mapping) and not set(inputs) <= set(x):
        raise ConfigError(
            key,
            f"has the keys {sorted(x)}, but {model.name}'s inputs are named "
            f"{sorted(inputs)} (missing: {sorted(set(inputs) - set(x))})",
            hint="key the features by the model's input names",
        )
    if isinstance(inputs, Mapping) and isinstance(x, Mapping):
        x = {name: x[name] for name in inputs}  # Keras reads the inputs' keys only
    # Keras's functional model takes a list for its dict of inputs, in the order of
    # their sorted names, with a warning ("The structure of `inputs` doesn't match").
    by_order = (
        isinstance(inputs, Mapping)
        and isinstance(x, (list, tuple))
        and len(tf.nest.flatten(inputs)) == len(tf.nest.flatten(x))
    )
    if isinstance(inputs, Mapping) != isinstance(x, Mapping) and not by_order:
        problem = "has another structure than"
    elif isinstance(inputs, Mapping) and not by_order and set(inputs) != set(x):
        problem = "has other input names than"
    elif len(tf.nest.flatten(inputs)) != len(tf.nest.flatten(x)):
        problem = "has another number of inputs than"
    else:
        wanted_leaves = tf.nest.flatten(inputs)
        given_leaves = tf.nest.flatten(x)
        if isinstance(inputs, Mapping):
            wanted_leaves = [inputs[k] for k in sorted(inputs)]
        if isinstance(x, Mapping):
            given_leaves = [x[k] for k in sorted(x)]
        for want, have in zip(wanted_leaves, given_leaves, strict=True):
            if not hasattr(have, "shape"):  # tf.data's spec of a `None`
                continue  # an input left out: the model says whether it is optional
            a, b = _adjust_rank(tuple(want.shape)[1:], tuple(have.shape))
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


def _input_dtypes(model: keras.Model) -> set[str]:
    """The dtypes of the model's inputs (a functional or built Sequential model), else
    an empty set (a subclassed model: its `call` says what it takes)."""
    structure = inputs_struct(model)
    if structure is None and isinstance(model, keras.Sequential) and model.built:
        structure = model.inputs
    leaves = [] if structure is None else tf.nest.flatten(structure)
    return {str(getattr(leaf, "dtype", None)) for leaf in leaves}


def _check_dtypes(model: keras.Model, x: Any, key: str) -> None:
    """Refuse strings for a model of numbers (TensorFlow's `UnimplementedError` at the
    first step), and complex numbers (Keras layers cast them to their real part, with
    only a warning).

    Raises:
        ConfigError: naming `key`, what the data holds and what the model takes.
    """
    given = {tf.as_dtype(leaf.dtype) for leaf in tf.nest.flatten(x) if hasattr(leaf, "dtype")}
    wanted = _input_dtypes(model)
    complex_ = sorted(d.name for d in given if d.is_complex)
    if complex_ and not any(w.startswith("complex") for w in wanted):
        raise ConfigError(
            key,
            f"holds complex numbers ({complex_[0]}), which {model.name} would train on as "
            "their real part only",
            hint="give real numbers, e.g. the real and imaginary parts as two features",
        )
    if tf.string in given and wanted and "string" not in wanted:
        raise ConfigError(
            key,
            f"holds strings, but {model.name} takes {', '.join(sorted(wanted))}",
            hint="give numbers (or a model with a string input: keras.Input(dtype='string'))",
        )


def _adjust_rank(wanted: tuple[Any, ...], given: tuple[Any, ...]) -> tuple[Any, Any]:
    """The shapes as Keras compares them after `Functional._adjust_input_rank`: data
    with one axis less than an input ending in 1 gains it, data with one axis more
    ending in 1 loses it (strings `(n,)` for `keras.Input((1,), dtype="string")`)."""
    if len(given) == len(wanted) - 1 and wanted and wanted[-1] == 1:
        return wanted[:-1], given
    if len(given) == len(wanted) + 1 and given and given[-1] == 1:
        return wanted, given[:-1]
    return wanted, given


def _check_target_keys(model: keras.Model, y: Any) -> None:
    """Refuse a dict `y` with a key that names none of the model's outputs (Keras keys
    targets by the output structure's keys, or by `output_names` for a list).

    Raises:
        ConfigError: naming `y`, the unknown keys and the outputs' names.
    """
    outputs = outputs_struct(model)
    if not isinstance(y, Mapping) or outputs is None:
        return
    names = list(outputs) if isinstance(outputs, Mapping) else list(model.output_names)
    unknown = sorted(str(k) for k in y if k not in names)
    if unknown:
        raise ConfigError(
            "y",
            f"has the key(s) {unknown}, which name none of {model.name}'s outputs {names}",
            hint="key the targets by the model's output names",
        )


def _by_input_names(model: keras.Model, inputs: Any, x: Any, key: str) -> Any:
    """A dict `x` for a model whose inputs are a list (or one input): the values of the
    inputs' names, in the inputs' order, as Keras's functional model maps them
    (`Functional._standardize_inputs`); extra keys are left out, as there.

    Raises:
        ConfigError: naming `key` and the input names that `x` lacks.
    """
    if not isinstance(x, Mapping) or isinstance(inputs, Mapping):
        return x
    leaves = tf.nest.flatten(inputs)
    names = [getattr(leaf, "name", None) for leaf in leaves]
    if None in names:
        return x
    missing = [name for name in names if name not in x]
    if missing:
        raise ConfigError(
            key,
            f"has the keys {sorted(map(str, x))}, but {model.name}'s inputs are named "
            f"{names} (missing: {missing})",
            hint="key the features by the model's input names (keras.Input(name=...))",
        )
    values = [x[name] for name in names]
    return values if isinstance(inputs, (list, tuple)) else values[0]


def _check_call(model: keras.Model, x: Any, key: str) -> None:
    """A built subclassed model called on a symbolic batch of `x`: its own shape checks."""
    batch = tf.nest.map_structure(
        # tf.data's spec of a `None` (an input left out) stays `None`: the model decides
        lambda spec: (
            keras.KerasTensor((None, *spec.shape), dtype=spec.dtype.name)
            if hasattr(spec, "shape")
            else None
        ),
        x,
    )
    try:
        compute_output_spec(model, batch, training=False)
    except UpstreamMoved:
        raise
    except ValueError as error:
        first = _cause_line(error)
        raise ConfigError(
            key,
            f"does not fit {model.name}, built for other inputs: {first}",
            hint="give data shaped as the model's inputs",
        ) from None
    except Exception:  # e.g. no `call` (keras.io's VAE, GAN): training tells
        return


def _cause_line(error: BaseException) -> str:
    """The line of a Keras layer's error that says what is wrong: Keras wraps it as
    "Exception encountered when calling ...", the cause on a later line (in bold)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    for line in lines:
        if not line.startswith("Exception encountered when calling"):
            return line
    return lines[0] if lines else type(error).__name__
