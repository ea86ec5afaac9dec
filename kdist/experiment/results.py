"""What a trained `Experiment` gives back: `evaluate`, `predict`, `objective`, `metrics`.

`Results` is a base of `kdist.Experiment` (`kdist.experiment.job`), which holds the run
these read; each reads data as `model.evaluate`/`model.predict` do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
from omegaconf import DictConfig

from kdist.callbacks.batch_hooks import TEST_HOOKS, overridden_hooks
from kdist.config.errors import ConfigError
from kdist.data.in_hand import check_inputs, given_batches
from kdist.data.source import Source
from kdist.engine import Controller, FitResult
from kdist.engine.building import optimizer_steps
from kdist.engine.runner import wants_test_hooks
from kdist.experiment import outputs as run_outputs
from kdist.experiment.compile_state import StepSettings, eager_if
from kdist.experiment.evaluating import evaluate_batches, keras_return
from kdist.experiment.predicting import predict_dataset, predict_split

__all__ = ["PREDICT_HOOKS", "Results", "say_unbatched_hooks"]

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


class Results:
    """`Experiment`'s evaluation, prediction and summaries (a base class: the run is the
    `Experiment`'s)."""

    cfg: DictConfig
    strategy: tf.distribute.Strategy
    source: Source
    model: keras.Model | None
    controller: Controller | None
    result: FitResult | None
    num_replicas: int
    _settings: StepSettings

    def _controller(self) -> Controller:
        raise NotImplementedError  # `Experiment._controller`

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        *,
        batch_size: int | None = None,
        verbose: Any = "auto",
        sample_weight: Any = None,
        steps: int | None = None,
        callbacks: Sequence[keras.callbacks.Callback] | None = None,
        return_dict: bool | None = None,
    ) -> Any:
        """Evaluate the model under the run's strategy, as `model.evaluate` does.

        Without `x`, the run's validation split (the config's data, or the data given
        to `fit`), returned as a dict (kdist's run-folder form). With `x`, the data as
        `model.evaluate` reads it (`kdist.data.in_hand.given_batches`: arrays in batches of
        `batch_size`, the last one partial), each batch cut over the replicas as
        `tf.distribute` cuts it for Keras.

        Args:
            x: arrays (or a dict or list of them), a `tf.data.Dataset`, a
                `keras.utils.PyDataset` or a generator. Defaults to `None`: the
                validation split.
            y: targets of arrays `x`. Defaults to `None`.
            batch_size: rows per batch of arrays. Defaults to `None`: 32, as in Keras.
            verbose: accepted for `model.evaluate`'s signature; kdist shows no
                progress bar here. Defaults to `"auto"`.
            sample_weight: per-example weights of arrays `x`. Defaults to `None`.
            steps: batches to read. Defaults to `None`: all.
            callbacks: Keras callbacks; their `on_test_begin`/`on_test_end` run, and
                without `x` their test-batch hooks too, as in `model.evaluate`.
                Defaults to `None`.
            return_dict: a dict `{metric: value}` when true; when false, Keras's form
                (one value alone, else a list in the model's metrics' order).
                Defaults to `None`: false with `x` (Keras's default), true without.

        Returns:
            The metrics, as `return_dict` says.

        Raises:
            ConfigError: naming the argument, for data the model cannot take.
        """
        del verbose  # no progress bar: one compiled loop over the batches
        if x is None:
            for name, value in (("y", y), ("sample_weight", sample_weight)):
                if value is not None:
                    raise ConfigError(name, "needs x: give the data it goes with")
        # A model no `fit` has bound to data, evaluated on data in hand, needs nothing
        # of the config's data (`data.source`), as `model.evaluate` needs no other data.
        runner = None
        if x is not None and self.model is not None and self.controller is None:
            model = self.model
        else:
            controller = self._controller()
            model, runner = controller.model, controller.runner
        callback_list = keras.callbacks.CallbackList(list(callbacks or ()), model=model)
        callback_list.on_test_begin()
        with eager_if(self._settings.run_eagerly):
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
                if hooked and isinstance(self.strategy, tf.distribute.ParameterServerStrategy):
                    say_unbatched_hooks(list(callbacks or ()), TEST_HOOKS, "evaluate")
                    hooked = False
                logs = evaluate_batches(
                    self.strategy,
                    runner,
                    batches,
                    model=model,
                    callbacks=callback_list if hooked else None,
                    steps_per_call=_steps_per_call(model),
                )
        callback_list.on_test_end(logs)
        return keras_return(
            model, logs, return_dict=x is None if return_dict is None else return_dict
        )

    def predict(
        self,
        x: Any = None,
        *,
        batch_size: int | None = None,
        verbose: Any = "auto",
        steps: int | None = None,
        callbacks: Sequence[keras.callbacks.Callback] | None = None,
        split: str = "validation",
    ) -> Any:
        """Predict with the model under the run's strategy, as `model.predict` does.

        Args:
            x: features (arrays, or a dict or list of them; a `tf.data.Dataset`, a
                `keras.utils.PyDataset` or a generator), read as `model.predict`
                reads them. Defaults to `None`: the examples of `split`.
            batch_size: rows per batch of arrays. Defaults to `None`: 32 (Keras's)
                for `x`, the run's global batch for a split.
            verbose: accepted for `model.predict`'s signature; no progress bar.
                Defaults to `"auto"`.
            steps: batches to read. Defaults to `None`: all.
            callbacks: Keras callbacks; their `on_predict_begin`/`on_predict_end` run,
                and with `x` their predict-batch hooks too, as in `model.predict`.
                Defaults to `None`.
            split: without `x`, `"validation"` or `"train"`: the split's examples,
                read once in order. Defaults to `"validation"`.

        Returns:
            NumPy arrays with the structure of the model's outputs, one row per example.

        Raises:
            ConfigError: naming the argument, for data the model cannot take.
        """
        del verbose
        if isinstance(x, str):  # the older form `predict("train")`
            x, split = None, x
        if x is not None and self.model is not None and self.controller is None:
            model = self.model  # nothing of the config's data, as in `evaluate`
        else:
            model = self._controller().model
        if x is None:
            say_unbatched_hooks(list(callbacks or ()), PREDICT_HOOKS, "predict")
        callback_list = keras.callbacks.CallbackList(list(callbacks or ()), model=model)
        callback_list.on_predict_begin()
        with eager_if(self._settings.run_eagerly):
            if x is None:
                outputs = predict_split(
                    self.strategy,
                    model,
                    self.source,
                    batch_size=int(batch_size or self.cfg.trainer.global_batch_size),
                    split=split,
                )
            else:
                batches = given_batches(x, batch_size=batch_size, steps=steps)
                check_inputs(model, _unbatched_spec(batches), key="x", needs_targets=False)
                outputs = predict_dataset(
                    self.strategy,
                    model,
                    batches,
                    callback_list,
                    steps_per_call=_steps_per_call(model),
                )
        callback_list.on_predict_end()
        return outputs

    def objective(self) -> float:
        """The value of `objective.name` after `fit`: what sweeps and the tuner optimise."""
        if self.result is None:
            raise RuntimeError("`objective()` needs a finished `fit()`.")
        return float(self.result.final_logs[str(self.cfg.objective.name)])

    def metrics(self) -> dict[str, Any]:
        """The summary written to `metrics.json` after `fit`."""
        if self.result is None or self.model is None:
            raise RuntimeError("`metrics()` needs a finished `fit()`.")
        return run_outputs.summary(
            self.result,
            self.cfg,
            steps=optimizer_steps(self.model),
            strategy_name=type(self.strategy).__name__,
            num_replicas=self.num_replicas,
        )


def _unbatched_spec(batches: tf.data.Dataset) -> Any:
    """One example's spec of a dataset of batches (the batch axis dropped)."""
    return tf.nest.map_structure(
        # tf.data's spec of a `None` (an optional input left out) stays as it is
        lambda spec: tf.TensorSpec(spec.shape[1:], spec.dtype) if hasattr(spec, "shape") else spec,
        batches.element_spec,
    )
