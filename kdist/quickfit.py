"""`kdist.fit`: train a Keras model on data in hand in one call, as `model.fit` does.

It composes a config (`strategy=` and any overrides), makes the `Experiment`, builds the
model inside `strategy.scope()` (a factory is called there) and calls `Experiment.fit`
with `model.fit`'s arguments. The `Experiment` stays reachable from what it returns, for
`evaluate`, `predict`, more `fit` calls and the run folder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras

from kdist.config.compose import compose
from kdist.config.errors import ConfigError
from kdist.experiment import Experiment
from kdist.experiment.fit_arguments import check_count

__all__ = ["fit"]


def _overrides(overrides: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        import json

        def text(value: Any) -> str:
            if value is None:
                return "null"
            if isinstance(value, bool):
                return "true" if value else "false"
            return value if isinstance(value, str) else json.dumps(value)

        return [f"{key}={text(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise ConfigError(
            "overrides",
            "is one string",
            value=overrides,
            hint='pass a list of Hydra overrides (["trainer.epochs=3"]) or a dict',
        )
    return [str(item) for item in overrides]


def fit(
    model: keras.Model | Callable[[], keras.Model],
    x: Any = None,
    y: Any = None,
    *,
    strategy: str | None = None,
    epochs: int = 1,
    batch_size: int | None = None,
    validation_data: Any = None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    run_dir: str | Path | None = None,
    **fit_kwargs: Any,
) -> keras.callbacks.History:
    """Train `model` on `x`, `y` under `strategy` with the kdist engine, in one call.

    Args:
        model: a `keras.Model` (compiled or not), or a function of no arguments that
            returns one: it is called inside `strategy.scope()`, so its variables are
            the strategy's (a model made outside the scope of a distributed strategy is
            rebuilt in it, with its weights). An uncompiled model gets the config's
            loss, metrics and optimizer (`trainer.loss`, `trainer.metrics`, `optimizer`).
        x: what `Experiment.fit` takes: NumPy arrays, a `tf.data.Dataset`, a
            `keras.utils.PyDataset` or a generator. Defaults to `None`: the config's data.
        y: targets of arrays `x`. Defaults to `None`.
        strategy: the `strategy=` config option (`one_device`, `mirrored`, `auto`, ...).
            Defaults to `None`: the config's, as on the command line (`one_device`).
        epochs: epochs to train, as in `model.fit`. Defaults to `1`.
        batch_size: the global batch (over all replicas). Defaults to `None`: 32 for
            arrays and a model you compiled (Keras's), else the config's
            `trainer.global_batch_size` (64); a dataset's own batches.
        validation_data: as in `model.fit`. Defaults to `None`.
        overrides: config keys, as a dict (`{"runtime.logical_devices": 2}`) or a list
            of Hydra overrides (`["trainer.steps_per_execution=16"]`). Defaults to `None`.
        run_dir: where the run's files go. Defaults to `None`: a new
            `outputs/<date>/<time>` folder.
        **fit_kwargs: `model.fit`'s other arguments (`callbacks`, `verbose`,
            `validation_split`, `sample_weight`, `class_weight`, `shuffle`,
            `steps_per_epoch`, ...), passed to `Experiment.fit`.

    Returns:
        The `keras.callbacks.History`. Its `model` is the trained model and its
        `experiment` the `kdist.Experiment`.

    Raises:
        ConfigError: naming the key or argument, for a config or data that cannot train.

    Example:

    ```python
    history = kdist.fit(
        make_model, x_train, y_train, epochs=3, validation_data=(x_val, y_val),
        overrides={"runtime.logical_devices": 2},
    )
    history.experiment.evaluate()
    ```
    """
    # Counts first: nothing is set up (or written) for a call that cannot train.
    check_count("epochs", epochs)
    check_count("batch_size", batch_size)
    cfg = compose([*([f"strategy={strategy}"] if strategy else []), *_overrides(overrides)])
    experiment = Experiment(cfg, run_dir=run_dir)
    if isinstance(model, keras.Model):
        built = model
    elif callable(model):
        with experiment.strategy.scope():
            built = model()
        if not isinstance(built, keras.Model):
            raise ConfigError(
                "model",
                f"returned {type(built).__name__}, not a keras.Model",
                value=getattr(model, "__name__", repr(model)),
            )
    else:
        raise ConfigError(
            "model",
            "must be a keras.Model or a function that returns one",
            value=type(model).__name__,
        )
    # The data first: a user's model meets it when it is built.
    experiment.build_model(model=built)
    history = experiment.fit(
        x,
        y,
        epochs=epochs,
        batch_size=batch_size,
        validation_data=validation_data,
        **fit_kwargs,
    )
    history.experiment = experiment
    return history
