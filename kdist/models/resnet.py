"""Residual networks: ResNet-20/32/44/56/110 for small images, ResNet-50 from keras.applications."""

from __future__ import annotations

from collections.abc import Sequence

import keras

from kdist.config.constants import RESNET_VARIANTS as VARIANTS
from kdist.models.checks import check_num_classes, check_positive

__all__ = ["CIFAR_DEPTHS", "VARIANTS", "resnet"]

# ResNet v1 for 32x32 images (He et al. 2015, section 4.2): depth 6n+2, three stages of
# n basic blocks with 16, 32 and 64 filters.
CIFAR_DEPTHS = {"resnet20": 20, "resnet32": 32, "resnet44": 44, "resnet56": 56, "resnet110": 110}


def _conv(filters: int, kernel: int, strides: int, weight_decay: float, name: str) -> keras.Layer:
    return keras.layers.Conv2D(
        filters,
        kernel,
        strides=strides,
        padding="same",
        use_bias=False,
        kernel_initializer="he_normal",
        kernel_regularizer=keras.regularizers.L2(weight_decay) if weight_decay else None,
        name=name,
    )


def _basic_block(
    x: keras.KerasTensor, filters: int, strides: int, weight_decay: float, name: str
) -> keras.KerasTensor:
    shortcut = x
    y = _conv(filters, 3, strides, weight_decay, f"{name}_conv1")(x)
    y = keras.layers.BatchNormalization(name=f"{name}_bn1")(y)
    y = keras.layers.Activation("relu", name=f"{name}_relu1")(y)
    y = _conv(filters, 3, 1, weight_decay, f"{name}_conv2")(y)
    y = keras.layers.BatchNormalization(name=f"{name}_bn2")(y)
    if strides != 1 or shortcut.shape[-1] != filters:
        # Projection shortcut (option B of the paper) where the shape changes.
        shortcut = _conv(filters, 1, strides, weight_decay, f"{name}_proj")(shortcut)
        shortcut = keras.layers.BatchNormalization(name=f"{name}_proj_bn")(shortcut)
    y = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.Activation("relu", name=f"{name}_out")(y)


def _cifar_resnet(
    inputs: keras.KerasTensor, depth: int, width: int, weight_decay: float
) -> keras.KerasTensor:
    blocks = (depth - 2) // 6
    x = _conv(width, 3, 1, weight_decay, "stem_conv")(inputs)
    x = keras.layers.BatchNormalization(name="stem_bn")(x)
    x = keras.layers.Activation("relu", name="stem_relu")(x)
    for stage in range(3):
        filters = width * 2**stage
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            x = _basic_block(
                x, filters, strides, weight_decay, f"stage{stage + 1}_block{block + 1}"
            )
    return keras.layers.GlobalAveragePooling2D(name="pool")(x)


def resnet(
    *,
    input_shape: Sequence[int],
    num_classes: int,
    variant: str = "resnet20",
    width: int = 16,
    weight_decay: float = 1e-4,
) -> keras.Model:
    """A residual network classifier that outputs float32 logits.

    `resnet20` ... `resnet110` are the ResNet v1 networks for 32x32 images (three stages
    of basic blocks, `width`, 2x and 4x filters); they accept any image of at least 4x4.
    `resnet50` is `keras.applications.ResNet50` with `weights=None` (nothing is
    downloaded) and a new classification head; it needs images of at least 32x32.

    Args:
        input_shape: `(height, width, channels)` of one image.
        num_classes: number of output logits.
        variant: one of `resnet20`, `resnet32`, `resnet44`, `resnet56`, `resnet110`,
            `resnet50`. Defaults to `"resnet20"`.
        width: filters of the first stage of the small-image variants (16 in the paper).
            Defaults to `16`.
        weight_decay: L2 penalty on the convolution kernels of the small-image variants
            (added to the loss through `model.losses`). Defaults to `1e-4`.

    Returns:
        An uncompiled `keras.Model`.

    Raises:
        ValueError: for an unknown variant or an input that is not an image.

    Example:

    ```python
    model = kdist.models.resnet(input_shape=(32, 32, 3), num_classes=10, variant="resnet56")
    ```
    """
    shape = tuple(int(d) for d in input_shape)
    if variant not in VARIANTS:
        raise ValueError(f"`variant` ({variant!r}) must be one of {', '.join(VARIANTS)}.")
    if len(shape) != 3:
        raise ValueError(f"`input_shape` ({shape}) must be (height, width, channels) for resnet.")
    check_num_classes(num_classes)
    check_positive("width", width)
    if weight_decay < 0:
        raise ValueError(f"`weight_decay` ({weight_decay}) must be >= 0.")
    inputs = keras.Input(shape=shape, name="inputs")
    if variant == "resnet50":
        if min(shape[:2]) < 32:
            raise ValueError(f"`input_shape` ({shape}) must be at least 32x32 for resnet50.")
        backbone = keras.applications.ResNet50(
            include_top=False, weights=None, input_shape=shape, pooling="avg"
        )
        features = backbone(inputs)
    else:
        features = _cifar_resnet(inputs, CIFAR_DEPTHS[variant], int(width), float(weight_decay))
    # Logits stay float32 under a mixed-precision policy so the loss is computed stably.
    outputs = keras.layers.Dense(num_classes, dtype="float32", name="logits")(features)
    return keras.Model(inputs, outputs, name=variant)
