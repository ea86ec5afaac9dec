"""`trainer.loss`, `trainer.metrics`, `trainer.loss_weights`: their forms, checked without Keras.

Each takes what `model.compile` takes, from the config:

- a Keras string identifier (`trainer.loss=mse`, `trainer.metrics=[mae]`);
- a `_target_` node (`{_target_: keras.losses.Huber, delta: 2.0}`);
- a mapping from output names to either of those (`{cls: sparse_categorical_crossentropy,
  aux: mse}`), or a list in output order;
- `null` for the loss: `SparseCategoricalCrossentropy(from_logits=True)`, what kdist's
  built-in classifiers (which output logits) need.

These checks run before TensorFlow is imported (`kdist.config.validate`);
`kdist.modeling.compiling` builds the same forms with Keras.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.compat.keras_private import outputs_struct
from kdist.config.errors import ConfigError
from kdist.config.targets import check_target_keys

__all__ = [
    "CLASSIFICATION_LOSSES",
    "DEFAULT_LOSS",
    "check_class_weight",
    "check_compile",
    "check_output_names",
    "default_metrics",
    "has_accuracy",
    "is_classification_loss",
    "is_sparse_classification_loss",
    "loss_names",
    "output_keys",
    "plain",
]

# Losses whose targets are class ids (sparse) or one-hot/probabilities over classes.
CLASSIFICATION_LOSSES = frozenset(
    {
        "sparse_categorical_crossentropy",
        "SparseCategoricalCrossentropy",
        "categorical_crossentropy",
        "CategoricalCrossentropy",
        "binary_crossentropy",
        "BinaryCrossentropy",
        "categorical_focal_crossentropy",
        "CategoricalFocalCrossentropy",
        "binary_focal_crossentropy",
        "BinaryFocalCrossentropy",
        "categorical_hinge",
        "CategoricalHinge",
        "hinge",
        "Hinge",
        "squared_hinge",
        "SquaredHinge",
    }
)
_SPARSE_LOSSES = frozenset({"sparse_categorical_crossentropy", "SparseCategoricalCrossentropy"})
DEFAULT_LOSS = {"_target_": "keras.losses.SparseCategoricalCrossentropy", "from_logits": True}


def plain(node: Any) -> Any:
    """A config node as plain Python (lists, dicts), resolved; anything else as it is."""
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _check_one(key: str, node: Any, kind: str) -> None:
    if isinstance(node, str):
        if not node.strip():
            raise ConfigError(key, f"must name a Keras {kind}", value=node)
        return
    if isinstance(node, Mapping) and "_target_" in node:
        check_target_keys(key, node)
        return
    raise ConfigError(
        key,
        f"must be a Keras {kind} name (e.g. mse) or a _target_ node",
        value=node,
    )


def check_compile(trainer: Any) -> None:
    """Check the shapes of `trainer.loss`, `metrics`, `loss_weights`, `class_weight`.

    Raises:
        ConfigError: naming the key.
    """
    loss = plain(trainer.get("loss"))
    if isinstance(loss, Mapping) and "_target_" not in loss:
        for name, value in loss.items():
            if value is not None:
                _check_one(f"trainer.loss.{name}", value, "loss")
    elif isinstance(loss, list):
        for i, value in enumerate(loss):
            if value is not None:
                _check_one(f"trainer.loss[{i}]", value, "loss")
    elif loss is not None:
        _check_one("trainer.loss", loss, "loss")

    metrics = plain(trainer.get("metrics"))
    groups: dict[str, Any]
    if metrics is None:
        groups = {}
    elif isinstance(metrics, Mapping) and "_target_" not in metrics:
        groups = {f"trainer.metrics.{name}": value for name, value in metrics.items()}
    else:
        groups = {"trainer.metrics": metrics}
    for key, value in groups.items():
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if item is not None:
                _check_one(f"{key}[{i}]" if isinstance(value, list) else key, item, "metric")

    weights = plain(trainer.get("loss_weights"))
    values = (
        list(weights.values())
        if isinstance(weights, Mapping)
        else (weights if isinstance(weights, list) else [weights])
    )
    if weights is not None and not all(_is_number(v) for v in values):
        raise ConfigError(
            "trainer.loss_weights",
            "must be numbers: one per output, as a list or by output name",
            value=weights,
        )
    check_class_weight(plain(trainer.get("class_weight")))


def check_class_weight(class_weight: Any) -> dict[int, float] | None:
    """`trainer.class_weight` as `{class id: weight}`, or `None`.

    Raises:
        ConfigError: naming `trainer.class_weight` unless it maps class ids (integers
            >= 0) to non-negative numbers.
    """
    if class_weight is None:
        return None
    if not isinstance(class_weight, Mapping) or not class_weight:
        raise ConfigError(
            "trainer.class_weight",
            "must map class ids to weights, e.g. {0: 1.0, 1: 5.0}",
            value=class_weight,
        )
    weights: dict[int, float] = {}
    for name, value in class_weight.items():
        try:
            index = int(name)
        except (TypeError, ValueError):
            index = -1
        if index < 0 or not _is_number(value) or value < 0:
            raise ConfigError(
                f"trainer.class_weight.{name}",
                "must map a class id (integer >= 0) to a weight >= 0",
                value=value,
            )
        weights[index] = float(value)
    return weights


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def default_metrics(loss: Any) -> Any:
    """`trainer.metrics` when it is null: `accuracy` with a classification loss, else none."""
    if is_sparse_classification_loss(loss):
        return [{"_target_": "keras.metrics.SparseCategoricalAccuracy", "name": "accuracy"}]
    if is_classification_loss(loss):
        return ["accuracy"]
    return None


def loss_names(loss: Any) -> list[str]:
    """The names of the losses in `trainer.loss` (class or identifier), for checks."""
    loss = plain(loss)
    if loss is None:
        return ["SparseCategoricalCrossentropy"]
    if isinstance(loss, Mapping) and "_target_" not in loss:
        values: Sequence[Any] = list(loss.values())
    elif isinstance(loss, list):
        values = loss
    else:
        values = [loss]
    names = []
    for value in values:
        if isinstance(value, Mapping):
            names.append(str(value.get("_target_", "")).rsplit(".", 1)[-1])
        elif isinstance(value, str):
            names.append(value)
    return names


def is_classification_loss(loss: Any) -> bool:
    """Whether every loss in `trainer.loss` is a classification loss (see the constant)."""
    names = loss_names(loss)
    return bool(names) and all(name in CLASSIFICATION_LOSSES for name in names)


def is_sparse_classification_loss(loss: Any) -> bool:
    """Whether `trainer.loss` takes class ids as targets (sparse categorical)."""
    names = loss_names(loss)
    return bool(names) and all(name in _SPARSE_LOSSES for name in names)


_ACCURACY_NAMES = frozenset(
    {
        "accuracy",
        "acc",
        "Accuracy",
        "SparseCategoricalAccuracy",
        "CategoricalAccuracy",
        "BinaryAccuracy",
    }
)


def has_accuracy(metrics: Any) -> bool:
    metrics = plain(metrics)
    if metrics is None:
        return False
    if isinstance(metrics, Mapping) and "_target_" not in metrics:
        items: list[Any] = []
        for value in metrics.values():
            items.extend(value if isinstance(value, list) else [value])
    else:
        items = metrics if isinstance(metrics, list) else [metrics]
    for item in items:
        if isinstance(item, str) and item in _ACCURACY_NAMES:
            return True
        if isinstance(item, Mapping) and item.get("name") == "accuracy":
            return True
    return False


def output_keys(model: Any) -> list[str]:
    """What `trainer.loss`, `loss_weights` and `metrics` mappings may be keyed by.

    As in Keras's `compile`: the keys of a dict output structure
    (`keras.Model(x, {"cls": ..., "aux": ...})`), else the output names.
    """
    structure = outputs_struct(model)
    if isinstance(structure, Mapping):
        return [str(key) for key in structure]
    return [str(name) for name in getattr(model, "output_names", None) or []]


def check_output_names(model: Any, trainer: Any) -> None:
    """Keys of `trainer.loss`, `loss_weights` and `metrics` mappings must name outputs.

    The keys of a dict output structure or, for other models, the output names (see
    `output_keys`); a mapping may name a subset of them (the other outputs get no loss,
    and need no targets).

    Raises:
        ConfigError: naming the first key that is not an output, and the outputs.
    """
    outputs = output_keys(model)
    if not outputs:
        return  # a subclassed model names no outputs; Keras checks at the first step
    for name in ("loss", "loss_weights", "metrics"):
        node = plain(trainer.get(name))
        if not isinstance(node, Mapping) or "_target_" in node:
            continue
        for key in node:
            if str(key) not in outputs:
                raise ConfigError(
                    f"trainer.{name}.{key}",
                    "is not an output of the model",
                    hint=f"the model's outputs: {', '.join(outputs)}",
                )
