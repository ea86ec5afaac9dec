"""Whether data given to `fit` fits the model: its inputs' structure and shapes, targets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from kdist.compat import UpstreamMoved
from kdist.compat.keras_private import compile_loss, compute_output_spec, inputs_struct
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
    # A model with its own `train_step` (keras.io's diffusion model) uses its compiled
    # loss on targets it makes itself: `fit` asks for no `y` then.
    own_step = type(model).train_step is not keras.Model.train_step
    if y is None and key == "x" and compile_loss(model) is not None and not own_step:
        raise ConfigError(
            "y",
            f"is missing: {model.name} is compiled with a loss, which needs targets",
            hint="pass y (or yield (x, y) from the dataset)",
        )
    inputs = inputs_struct(model)
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
    batch = tf.nest.map_structure(
        lambda spec: keras.KerasTensor((None, *spec.shape), dtype=spec.dtype.name), x
    )
    try:
        compute_output_spec(model, batch, training=False)
    except UpstreamMoved:
        raise
    except ValueError as error:
        first = str(error).strip().splitlines()[0]
        raise ConfigError(
            key,
            f"does not fit {model.name}, built for other inputs: {first}",
            hint="give data shaped as the model's inputs",
        ) from None
    except Exception:  # e.g. no `call` (keras.io's VAE, GAN): training tells
        return
