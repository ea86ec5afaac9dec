"""A multi-layer perceptron classifier."""

from __future__ import annotations

from collections.abc import Sequence

import keras

from kdist.models.checks import check_dropout, check_num_classes

__all__ = ["mlp"]


def mlp(
    *,
    input_shape: Sequence[int],
    num_classes: int,
    units: Sequence[int] = (128,),
    dropout: float = 0.0,
    activation: str = "relu",
) -> keras.Model:
    """A multi-layer perceptron on flattened inputs that outputs logits.

    Args:
        input_shape: shape of one example, without the batch axis.
        num_classes: number of output logits.
        units: width of each hidden layer. Defaults to `(128,)`.
        dropout: dropout rate after each hidden layer. Defaults to `0.0`.
        activation: hidden-layer activation. Defaults to `"relu"`.

    Returns:
        An uncompiled `keras.Model`.

    Example:

    ```python
    model = kdist.models.mlp(input_shape=(8, 8, 1), num_classes=10, units=[64, 64])
    ```
    """
    check_num_classes(num_classes)
    check_dropout(dropout)
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = keras.layers.Flatten()(inputs)
    for i, width in enumerate(units):
        x = keras.layers.Dense(int(width), activation=activation, name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout)(x)
    # Logits stay float32 under a mixed-precision policy so the loss is computed stably.
    outputs = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="mlp")
