"""Whether the weights are finite: checked before a save, so the newest one is finite."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = [
    "NonFiniteLossError",
    "NonFiniteWeightsError",
    "all_finite",
    "finite_fn",
    "non_finite_message",
]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


class NonFiniteWeightsError(NonFiniteLossError):
    """The weights are NaN or infinite at a save although the logged loss was finite.

    That happens when the bad values do not reach the loss: e.g. NaN in a kernel under
    ReLU, where oneDNN's fused MatMul+BiasAdd+Relu (TensorFlow's default on many x86 CPUs)
    gives 0 for NaN. A subclass of `NonFiniteLossError`, so it stops the run the same way
    (the train command exits with status 3 and one line).
    """


def all_finite(variables: list[tf.Variable]) -> bool:
    floating = [v for v in variables if tf.as_dtype(v.dtype).is_floating]
    if not floating:
        return True
    return bool(finite_fn(tuple(floating))().numpy())


_FINITE_FNS: dict[tuple[int, ...], Any] = {}


def finite_fn(variables: tuple[tf.Variable, ...]) -> Any:
    """One traced check of all `variables` (one call instead of a host copy of each)."""
    key = tuple(id(v) for v in variables)
    if key not in _FINITE_FNS:

        @tf.function
        def finite() -> tf.Tensor:
            checks = [tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))) for v in variables]
            return tf.reduce_all(tf.stack(checks))

        _FINITE_FNS.clear()  # one model at a time: do not hold on to old variables
        _FINITE_FNS[key] = finite
    return _FINITE_FNS[key]


def non_finite_message(steps: int) -> str:
    # What the run folder still holds is for the caller to say (`kdist.train`): it may
    # hold no backup at all yet.
    return (
        f"the weights are not finite after step {steps} (the training loss did not "
        "show it); stopped without saving this state"
    )
