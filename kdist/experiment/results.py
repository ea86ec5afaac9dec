"""What a trained `Experiment` gives back: `evaluate`, `predict`, `objective`, `metrics`.

Functions of the model, the strategy and the run's results, which `kdist.Experiment`
(`kdist.experiment.job`) hands them; each reads data as `model.evaluate`/`model.predict` do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
from omegaconf import DictConfig

from kdist.config.errors import ConfigError
from kdist.data.in_hand import check_inputs, given_batches
from kdist.data.source import Source
from kdist.engine import FitResult, Runner
from kdist.engine.building import optimizer_steps
from kdist.engine.runner import TEST_HOOKS, overridden_hooks, wants_test_hooks
from kdist.experiment import outputs as run_outputs
from kdist.experiment.binding import eager_if
from kdist.experiment.evaluating import evaluate_batches, keras_return
from kdist.experiment.predicting import predict_dataset, predict_split

__all__ = [
    "PREDICT_HOOKS",
    "check_without_x",
    "evaluate",
    "metrics",
    "objective",
    "predict",
    "say_unbatched_hooks",
]

log = logging.getLogger(__name__)

PREDICT_HOOKS = ("on_predict_batch_begin", "on_predict_batch_end")


def say_unbatched_hooks(
    callbacks: Sequence[keras.callbacks.Callback], hooks: Sequence[str], call: str
) -> None:
    """One log line naming the batch hooks of `callbacks` that `call` does not run."""
    names = [f"{type(c).__name__}.{hook}" for c in callbacks for hook in overridden_hooks(c, hooks)]
    if names:
        log.warning(
            "%s are not called by %s: kdist reads all the batches in one compiled call",
            ", ".join(names),
            call,
        )


def _steps_per_call(model: keras.Model) -> int:
    """The batches between two batch hooks: the model's own `steps_per_execution`."""
    return max(int(getattr(model, "steps_per_execution", 1) or 1), 1)


def check_without_x(x: Any, **given: Any) -> None:
    """`evaluate`'s `y` and `sample_weight` need `x` (each named)."""
    if x is None:
        for name, value in given.items():
            if value is not None:
                raise ConfigError(name, "needs x: give the data it goes with")


def evaluate(
    model: keras.Model,
    runner: Runner | None,
    strategy: tf.distribute.Strategy,
    x: Any,
    y: Any,
    *,
    batch_size: int | None,
    sample_weight: Any,
    steps: int | None,
    callbacks: Sequence[keras.callbacks.Callback] | None,
    return_dict: bool | None,
    run_eagerly: bool,
) -> Any:
    """`Experiment.evaluate` of `model`: with `x`, the data as `model.evaluate` reads it;
    without it, `runner`'s validation split (the path of `fit`'s validation)."""
    callback_list = keras.callbacks.CallbackList(list(callbacks or ()), model=model)
    callback_list.on_test_begin()
    with eager_if(run_eagerly):
        if x is None:
            # The validation split: the path of `fit`'s validation, test-batch hooks
            # included where a callback defines them.
            hooks = wants_test_hooks(callback_list.callbacks)
            assert runner is not None
            logs = runner.evaluate(callback_list if hooks else None)
        else:
            batches = given_batches(
                x, y, sample_weight=sample_weight, batch_size=batch_size, steps=steps
            )
            check_inputs(model, _unbatched_spec(batches), key="x")
            hooked = any(overridden_hooks(c, TEST_HOOKS) for c in callbacks or ())
            if hooked and isinstance(strategy, tf.distribute.ParameterServerStrategy):
                say_unbatched_hooks(list(callbacks or ()), TEST_HOOKS, "evaluate")
                hooked = False
            logs = evaluate_batches(
                strategy,
                runner,
                batches,
                model=model,
                callbacks=callback_list if hooked else None,
                steps_per_call=_steps_per_call(model),
            )
    callback_list.on_test_end(logs)
    return keras_return(model, logs, return_dict=x is None if return_dict is None else return_dict)


def predict(
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    source: Source | None,
    x: Any,
    *,
    batch_size: int | None,
    steps: int | None,
    callbacks: Sequence[keras.callbacks.Callback] | None,
    split: str,
    run_eagerly: bool,
) -> Any:
    """`Experiment.predict` of `model`: with `x`, the data as `model.predict` reads it;
    without it, the examples of `source`'s `split` in batches of `batch_size`."""
    if x is None:
        say_unbatched_hooks(list(callbacks or ()), PREDICT_HOOKS, "predict")
    callback_list = keras.callbacks.CallbackList(list(callbacks or ()), model=model)
    callback_list.on_predict_begin()
    with eager_if(run_eagerly):
        if x is None:
            assert source is not None and batch_size is not None
            outputs = predict_split(strategy, model, source, batch_size=batch_size, split=split)
        else:
            batches = given_batches(x, batch_size=batch_size, steps=steps)
            check_inputs(model, _unbatched_spec(batches), key="x", needs_targets=False)
            outputs = predict_dataset(
                strategy, model, batches, callback_list, steps_per_call=_steps_per_call(model)
            )
    callback_list.on_predict_end()
    return outputs


def objective(result: FitResult | None, cfg: DictConfig) -> float:
    """The value of `objective.name` in `result`'s last logs."""
    if result is None:
        raise RuntimeError("`objective()` needs a finished `fit()`.")
    return float(result.final_logs[str(cfg.objective.name)])


def metrics(
    result: FitResult | None,
    cfg: DictConfig,
    model: keras.Model | None,
    strategy: tf.distribute.Strategy,
    num_replicas: int,
    *,
    global_batch_size: int,
) -> dict[str, Any]:
    """The summary of `result` written to `metrics.json` (`global_batch_size`: the
    run's data plan's, `kdist.experiment.run_data.DataPlan`)."""
    if result is None or model is None:
        raise RuntimeError("`metrics()` needs a finished `fit()`.")
    return run_outputs.summary(
        result,
        cfg,
        steps=optimizer_steps(model),
        strategy_name=type(strategy).__name__,
        num_replicas=num_replicas,
        global_batch_size=global_batch_size,
    )


def _unbatched_spec(batches: tf.data.Dataset) -> Any:
    """One example's spec of a dataset of batches (the batch axis dropped)."""
    return tf.nest.map_structure(
        # tf.data's spec of a `None` (an optional input left out) stays as it is
        lambda spec: tf.TensorSpec(spec.shape[1:], spec.dtype) if hasattr(spec, "shape") else spec,
        batches.element_spec,
    )
