"""`trainer.loss`, `trainer.metrics`, `trainer.loss_weights` built the Keras way.

The forms each key takes, and their checks before TensorFlow starts, are in
`kdist.config.compile_rules`; this module builds what `model.compile` takes from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from kdist.config.compile_rules import DEFAULT_LOSS, default_metrics, plain
from kdist.config.errors import ConfigError

__all__ = ["build_loss", "build_loss_weights", "build_metrics", "check_logits", "takes_logits"]

# Output activations after which the model's outputs are probabilities, not logits.
_PROBABILITY_ACTIVATIONS = ("softmax", "sigmoid")


def _build_one(key: str, node: Any, kind: str) -> Any:
    import keras

    from kdist.config.targets import instantiate

    if node is None:
        return None
    if isinstance(node, Mapping):
        return instantiate(OmegaConf.create(dict(node)), _convert_="all")
    getter = keras.losses.get if kind == "loss" else keras.metrics.get
    try:
        if kind == "metric" and node in ("accuracy", "acc", "crossentropy", "ce"):
            return node  # Keras picks the variant that fits the targets' shapes
        getter(node)
    except (ValueError, TypeError):
        raise ConfigError(
            key,
            f"is not a Keras {kind}",
            value=node,
            hint=(
                "use a name from keras.losses (mse, mae, huber, binary_crossentropy, "
                "sparse_categorical_crossentropy, ...) or a _target_ node"
                if kind == "loss"
                else "use a name from keras.metrics (accuracy, mae, mse, auc, ...) "
                "or a _target_ node"
            ),
        ) from None
    return node


def build_loss(loss: Any) -> Any:
    """What `model.compile(loss=...)` takes, from `trainer.loss` (see the module)."""
    loss = plain(loss)
    if loss is None:
        return _build_one("trainer.loss", DEFAULT_LOSS, "loss")
    if isinstance(loss, Mapping) and "_target_" not in loss:
        return {
            str(name): _build_one(f"trainer.loss.{name}", value, "loss")
            for name, value in loss.items()
        }
    if isinstance(loss, list):
        return [_build_one(f"trainer.loss[{i}]", value, "loss") for i, value in enumerate(loss)]
    return _build_one("trainer.loss", loss, "loss")


def build_metrics(metrics: Any, loss: Any = None) -> Any:
    """What `model.compile(metrics=...)` takes, from `trainer.metrics` (see the module).

    Args:
        metrics: the `trainer.metrics` node.
        loss: the `trainer.loss` node, for the default metrics when `metrics` is null.
            Defaults to `None` (the default loss).
    """
    metrics = plain(metrics)
    if metrics is None:
        metrics = default_metrics(plain(loss))
    if metrics is None or metrics == []:
        # None, not []: Keras's compiled metrics, even none, read a target per output,
        # which a model with targets for some outputs only does not have.
        return None

    def many(key: str, value: Any) -> list[Any]:
        items = value if isinstance(value, list) else [value]
        return [_build_one(f"{key}[{i}]", item, "metric") for i, item in enumerate(items)]

    if isinstance(metrics, Mapping) and "_target_" not in metrics:
        return {str(name): many(f"trainer.metrics.{name}", v) for name, v in metrics.items()}
    return many("trainer.metrics", metrics)


def build_loss_weights(weights: Any) -> Any:
    """What `model.compile(loss_weights=...)` takes, from `trainer.loss_weights`."""
    weights = plain(weights)
    if isinstance(weights, Mapping):
        return {str(name): float(value) for name, value in weights.items()}
    if isinstance(weights, list):
        return [float(value) for value in weights]
    return weights


def takes_logits(loss: Any) -> bool:
    """Whether `trainer.loss` (one loss, in its config forms) takes logits (`from_logits`).

    Args:
        loss: the `trainer.loss` node; `None` is kdist's default loss, which takes logits.

    Returns:
        `True` for the default loss and a `_target_` node with `from_logits: true`;
        `False` for a Keras name (Keras's string losses take probabilities) and others.
    """
    loss = plain(loss)
    if loss is None:
        loss = DEFAULT_LOSS
    return isinstance(loss, Mapping) and bool(loss.get("from_logits", False))


def check_logits(model: Any, loss: Any, *, key: str = "trainer.loss") -> None:
    """Refuse a loss that takes logits for a model whose one output is a softmax or sigmoid.

    Keras only warns, at every trace ("received `from_logits=True`, but the `output`
    argument was produced by a Softmax activation"), and whether its loss then reads the
    logits under the activation depends on the backend and on a cast between them (mixed
    precision): the loss may be taken of probabilities as if they were logits.

    Args:
        model: the model kdist is about to compile.
        loss: the `trainer.loss` node.
        key: the config key to name. Defaults to `"trainer.loss"`.

    Raises:
        ConfigError: naming `key`, the output layer and its activation.
    """
    import keras

    if not takes_logits(loss):
        return
    outputs = getattr(model, "outputs", None)  # a subclassed model has none: not checked
    if not outputs or len(outputs) != 1:
        return
    layers = [layer for layer in model.layers if _output_of(layer) is outputs[0]]
    if not layers:
        return
    layer = layers[0]
    if isinstance(layer, keras.layers.Softmax):
        activation = "softmax"
    else:
        activation = getattr(getattr(layer, "activation", None), "__name__", "")
    if activation not in _PROBABILITY_ACTIVATIONS:
        return
    shown = "the default loss" if plain(loss) is None else "it"
    raise ConfigError(
        key,
        f"{shown} takes logits (from_logits=True), but the model's output layer "
        f"{layer.name!r} ends in {activation}, so its outputs are probabilities",
        hint="set from_logits: false in trainer.loss (e.g. "
        "trainer.loss=sparse_categorical_crossentropy, which takes probabilities), "
        f"or give the output layer no {activation} (logits)",
    )


def _output_of(layer: Any) -> Any:
    try:
        return layer.output
    except (AttributeError, ValueError):
        return None  # a layer never called, or called more than once
