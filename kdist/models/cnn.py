"""The classic MNIST convolutional network."""

from __future__ import annotations

from collections.abc import Sequence

import keras

__all__ = ["cnn"]


def cnn(
    *,
    input_shape: Sequence[int],
    num_classes: int,
    filters: Sequence[int] = (32, 64),
    kernel_size: int = 5,
    dense_units: int = 1024,
    dropout: float = 0.0,
) -> keras.Model:
    """The classic MNIST CNN: (conv 5x5 relu, max-pool 2) per filter count, dense, logits.

    With the defaults: conv 32 5x5, pool, conv 64 5x5, pool, dense 1024, dense classes.
    Convolutions use `same` padding so small inputs such as 8x8 digits also fit.

    Args:
        input_shape: `(height, width, channels)` of one example.
        num_classes: number of output logits.
        filters: filters of each convolution block. Defaults to `(32, 64)`.
        kernel_size: convolution kernel size. Defaults to `5`.
        dense_units: width of the dense layer. Defaults to `1024`.
        dropout: dropout rate before the output layer. Defaults to `0.0`.

    Returns:
        An uncompiled `keras.Model`.
    """
    if len(tuple(input_shape)) != 3:
        raise ValueError(
            f"`input_shape` ({tuple(input_shape)}) must be (height, width, channels) for cnn."
        )
    inputs = keras.Input(shape=tuple(input_shape), name="inputs")
    x = inputs
    for i, count in enumerate(filters):
        x = keras.layers.Conv2D(
            int(count), kernel_size, padding="same", activation="relu", name=f"conv_{i}"
        )(x)
        x = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{i}")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(int(dense_units), activation="relu", name="dense")(x)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    outputs = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="cnn")
