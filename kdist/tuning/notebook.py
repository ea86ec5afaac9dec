"""A search from a notebook, keras-tuner's way: `build_model(hp)` and the data in hand.

```python
import kdist.tune

tuner = kdist.tune.search(
    build_model, x_train, y_train, validation_data=(x_val, y_val),
    max_trials=4, epochs=2, strategy="mirrored", overrides=["runtime.logical_devices=2"],
)
best_hp = tuner.get_best_hyperparameters()[0]     # keras_tuner.HyperParameters
model = tuner.get_best_models()[0]                 # the best trial's trained model
model = build_model(best_hp)                       # or a fresh one, as in keras-tuner
```

Each trial is a kdist training job (`kdist.tuning.tuner.KdistTuner`) in
`<run_dir>/trials/trial_<id>/`, under the strategy given, with `build_model` built in its
`strategy.scope()` (its own compile kept). The arrays are written once to
`<run_dir>/data.npz` and read by every trial through kdist's `npz` source (per-replica
batching, seeded shuffling), so `kdist.tune.best_config(directory)` reruns the best
trial in the same notebook (`kdist.Experiment(kdist.tune.best_config(directory))`: the
config composed from `best.yaml`, every `_target_` checked by kdist's trust check).

A `keras_tuner.HyperModel` whose class overrides `fit(self, hp, model, *args, **kwargs)`
trains each trial through it, `model.fit` being the trial's `Experiment.fit`
(`kdist.tuning.fit_override`). The search holds `directory` while it runs: a second search
there is refused (`kdist.tuning.folder`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from kdist.compat import UpstreamMoved
from kdist.compat.tools_private import hydra_locate
from kdist.config.errors import ConfigError
from kdist.models import hypermodel as hm
from kdist.runs import layout
from kdist.tuning.driver import SearchResult, run
from kdist.tuning.fit_override import overrides_fit
from kdist.tuning.oracles import TrialStatus

__all__ = ["Tuner", "search"]

DATA_FILE = "data.npz"


def _target_path(obj: Any) -> str:
    """`model._target_` for `obj`: its importable name, else the notebook placeholder."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and name and "<" not in name:
        path = f"{module}.{name}"
        try:
            if hydra_locate(path) is obj:
                return path
        except UpstreamMoved:
            raise
        except Exception:  # not importable under that name (a closure, a deleted cell)
            pass
    return "kdist.models.hypermodel.given_in_notebook"


def _is_dataset(x: Any) -> bool:
    import tensorflow as tf

    return isinstance(x, (tf.data.Dataset, keras.utils.PyDataset))


def _arrays(name: str, x: Any, y: Any) -> dict[str, Any]:
    if y is None:
        raise ConfigError(
            name,
            "needs targets: search(build_model, x, y, ...) takes NumPy arrays x and y",
        )
    arrays: dict[str, Any] = {"x": np.asarray(x), "y": np.asarray(y)}
    if arrays["x"].dtype == object or arrays["y"].dtype == object:
        raise ConfigError(name, "must be NumPy arrays of numbers or strings, not objects")
    if len(arrays["x"]) != len(arrays["y"]):
        raise ConfigError(
            name,
            f"has {len(arrays['x'])} examples in x and {len(arrays['y'])} in y",
        )
    return arrays


class Tuner:
    """Search the hyperparameters of a keras-tuner hypermodel with kdist trials.

    The shape of keras-tuner's tuners: make it, `search` the data, then
    `get_best_hyperparameters` and `get_best_models`.

    Args:
        hypermodel: `build_model(hp)`, or a `keras_tuner.HyperModel` (class instance).
        objective: the metric to optimise, e.g. `"val_accuracy"`, or a
            `keras_tuner.Objective`. Defaults to `None`: `"val_loss"` with validation
            data, else `"loss"` (keras-tuner's default).
        max_trials: the most trials. Defaults to `10`.
        tuner: `"random"`, `"bayesian"` or `"hyperband"`. Defaults to `"random"`.
        strategy: a `strategy` option (`"mirrored"`, `"one_device"`, ...).
            Defaults to `None`: the config's (`auto`).
        directory: the search's run folder. Defaults to `None`: `outputs/<date>/<time>`.
        overrides: more kdist overrides for every trial, e.g.
            `["runtime.logical_devices=2", "callbacks=minimal"]`; config keys to search
            with the hypermodel's hyperparameters go in `+tuner.space.<key>=...`.
            Defaults to `()`.
        overwrite: start afresh in `directory` instead of resuming. Defaults to `False`.

    Raises:
        ValueError: when `hypermodel` is not a keras-tuner hypermodel or `max_trials`
            is not positive.
    """

    def __init__(
        self,
        hypermodel: Any,
        *,
        objective: Any = None,
        max_trials: int = 10,
        tuner: str = "random",
        strategy: str | None = None,
        directory: str | Path | None = None,
        overrides: Sequence[str] = (),
        overwrite: bool = False,
    ):
        if not hm.is_hypermodel(hypermodel):
            raise ValueError(
                f"`hypermodel` ({hypermodel!r}) must be build_model(hp) (first parameter "
                "named hp) or a keras_tuner.HyperModel."
            )
        if int(max_trials) < 1:
            raise ValueError(f"`max_trials` ({max_trials}) must be a positive integer.")
        if isinstance(hypermodel, type):
            hypermodel = hypermodel()
        from kdist.runs.layout import default_run_dir

        self.hypermodel = hypermodel
        self.objective = objective
        self.max_trials = int(max_trials)
        self.tuner = str(tuner)
        self.strategy = strategy
        self.directory = Path(directory or default_run_dir(microseconds=True))
        self.overrides = list(overrides)
        self.overwrite = bool(overwrite)
        self.result: SearchResult | None = None

    def _objective(self, validates: bool) -> list[str]:
        objective = self.objective
        if objective is None:
            return [f"objective.name={'val_loss' if validates else 'loss'}"]
        name = getattr(objective, "name", objective)
        out = [f"objective.name={name}"]
        direction = getattr(objective, "direction", None)
        if direction:
            out.append(f"objective.direction={direction}")
        return out

    def search(
        self,
        x: Any,
        y: Any = None,
        *,
        validation_data: Any = None,
        validation_split: float | None = None,
        epochs: int | None = None,
        batch_size: int | None = None,
        verbose: int = 0,
    ) -> SearchResult:
        """Run the trials on `x`, `y`, with `model.fit`'s names.

        NumPy arrays are written once to `<directory>/data.npz` and read through the `npz`
        source, so that `best.yaml`'s overrides rerun a trial; a `tf.data.Dataset` or a
        `keras.utils.PyDataset` goes to each trial's `Experiment.fit` as it is (batches
        that come made are global batches), and a rerun needs it in hand again.

        Args:
            x: the training features (NumPy array), or a `tf.data.Dataset` or
                `keras.utils.PyDataset` of `(x, y)`.
            y: the training targets (NumPy array; none with a dataset).
            validation_data: `(x_val, y_val)`, or a dataset with `x` a dataset.
                Defaults to `None`.
            validation_split: a share of `x`, `y` held out for validation when there is
                no `validation_data`. Defaults to `None`: no validation.
            epochs: epochs per trial (`trainer.epochs`). Defaults to `None`: the config's.
            batch_size: the global batch (`trainer.global_batch_size`). Defaults to
                `None`: the config's.
            verbose: 0 silent, 1 a progress bar per trial, 2 a line per epoch.
                Defaults to `0`.

        Returns:
            The `SearchResult` (also in `self.result`).

        Raises:
            ConfigError: for bad data or settings, naming the argument or key.
        """
        import kdist

        if _is_dataset(x):
            return self._search_dataset(
                x, y, validation_data, epochs=epochs, batch_size=batch_size, verbose=verbose
            )
        arrays = _arrays("x", x, y)
        every = [
            *self._common(verbose),
            "data=npz",
            f"data.source.path={self.directory / DATA_FILE}",
        ]
        if validation_data is not None:
            if validation_split is not None:
                raise ConfigError(
                    "validation_split",
                    "cannot be given with validation_data",
                    value=validation_split,
                )
            val = _arrays("validation_data", *validation_data)
            arrays.update(x_val=val["x"], y_val=val["y"])
            every += ["data.source.validation_x_key=x_val", "data.source.validation_y_key=y_val"]
        elif validation_split is not None:
            if not 0.0 < float(validation_split) < 1.0:
                raise ConfigError(
                    "validation_split", "must be between 0 and 1", value=validation_split
                )
            every.append(f"data.source.validation_fraction={float(validation_split)}")
        else:
            every.append("trainer.validation=false")
        validates = validation_data is not None or validation_split is not None
        if arrays["x"].dtype == np.uint8:
            every.append("data.source.scale=1.0")  # as Keras feeds them: no [0, 1] rescale
        if self.strategy is not None:
            every.append(f"strategy={self.strategy}")
        if epochs is not None:
            every.append(f"trainer.epochs={int(epochs)}")
        if batch_size is not None:
            every.append(f"trainer.global_batch_size={int(batch_size)}")
        every += self._objective(validates)
        every += self.overrides
        cfg = kdist.compose(every, config_name="tune")
        # Before the arrays are written into it: a folder another search holds is refused.
        self._accept(cfg)
        self.directory.mkdir(parents=True, exist_ok=True)
        np.savez(self.directory / DATA_FILE, **arrays)
        fit_kwargs = None
        if overrides_fit(self.hypermodel):
            # keras-tuner hands the search's data to `HyperModel.fit`, whose `model.fit`
            # then batches it as Keras does (a partial last batch): the same arrays go to
            # each trial's `Experiment.fit` (the npz source, read by a rerun of
            # `best.yaml`, keeps full batches).
            fit_kwargs = {"x": arrays["x"], "y": arrays["y"]}
            if validation_data is not None:
                fit_kwargs["validation_data"] = (arrays["x_val"], arrays["y_val"])
            elif validation_split is not None:
                fit_kwargs["validation_split"] = float(validation_split)
        self.result = run(
            cfg,
            run_dir=self.directory,
            overrides=every,
            hypermodel_object=self.hypermodel,
            fit_kwargs=fit_kwargs,
            folder_key="directory",
        )
        return self.result

    def _accept(self, cfg: Any) -> None:
        from omegaconf import OmegaConf

        from kdist.tuning.folder import accept_search_dir

        accept_search_dir(
            self.directory,
            key="directory",
            allow_foreign_files=bool(
                OmegaConf.select(cfg, "trainer.allow_foreign_files", default=False)
            ),
        )

    def _common(self, verbose: int) -> list[str]:
        return [
            f"tuner={self.tuner}",
            f"tuner.max_trials={self.max_trials}",
            f"tuner.overwrite={'true' if self.overwrite else 'false'}",
            f"tuner.verbose={int(verbose)}",
            "~tuner/space",
            "model=custom",
            f"model._target_={_target_path(self.hypermodel)}",
            f"trainer.verbose={int(verbose)}",
        ]

    def _search_dataset(
        self,
        x: Any,
        y: Any,
        validation_data: Any,
        *,
        epochs: int | None,
        batch_size: int | None,
        verbose: int,
    ) -> SearchResult:
        """Each trial's `Experiment.fit(x, validation_data=...)` takes the dataset."""
        import kdist

        if y is not None:
            raise ConfigError("y", "cannot be given with a dataset x: its elements are (x, y)")
        every = self._common(verbose)
        if validation_data is None:
            every.append("trainer.validation=false")
        if self.strategy is not None:
            every.append(f"strategy={self.strategy}")
        if epochs is not None:
            every.append(f"trainer.epochs={int(epochs)}")
        if batch_size is not None:
            every.append(f"trainer.global_batch_size={int(batch_size)}")
        every += self._objective(validation_data is not None)
        every += self.overrides
        cfg = kdist.compose(every, config_name="tune")
        self.result = run(
            cfg,
            run_dir=self.directory,
            overrides=every,
            hypermodel_object=self.hypermodel,
            fit_kwargs={"x": x, "validation_data": validation_data},
            folder_key="directory",
        )
        return self.result

    def _best_trials(self, count: int) -> list[Any]:
        if self.result is None or self.result.oracle is None:
            raise RuntimeError("Call `search(...)` first.")
        trials = self.result.oracle.get_best_trials(count)
        return [t for t in trials if t.status == TrialStatus.COMPLETED]

    def get_best_hyperparameters(self, num_trials: int = 1) -> list[Any]:
        """The best trials' `keras_tuner.HyperParameters`, best first (as keras-tuner's).

        `build_model(hp)` builds a fresh model with one of them.
        """
        return [trial.hyperparameters for trial in self._best_trials(num_trials)]

    def get_best_models(self, num_models: int = 1) -> list[keras.Model]:
        """The best trials' trained models (`model.keras` of their folders), best first."""
        models = []
        for trial in self._best_trials(num_models):
            path = self.directory / "trials" / f"trial_{trial.trial_id}" / layout.MODEL
            if not path.is_file():
                raise FileNotFoundError(
                    f"trial {trial.trial_id} saved no model at {path} (callbacks.save_model=false?)"
                )
            models.append(keras.models.load_model(path))
        return models


def search(hypermodel: Any, x: Any, y: Any = None, **kwargs: Any) -> Tuner:
    """One call: make a `Tuner` and search `x`, `y`; return the tuner.

    Args:
        hypermodel: `build_model(hp)` or a `keras_tuner.HyperModel`.
        x: the training features.
        y: the training targets.
        **kwargs: `Tuner` arguments (`objective`, `max_trials`, `tuner`, `strategy`,
            `directory`, `overrides`, `overwrite`) and `Tuner.search` arguments
            (`validation_data`, `validation_split`, `epochs`, `batch_size`, `verbose`).

    Returns:
        The `Tuner`, searched: `get_best_hyperparameters()`, `get_best_models()`, `result`.

    Example:

    ```python
    tuner = kdist.tune.search(build_model, x, y, validation_data=(xv, yv), max_trials=4)
    best_hp = tuner.get_best_hyperparameters()[0]
    ```
    """
    fit_keys = ("validation_data", "validation_split", "epochs", "batch_size", "verbose")
    fit_kwargs = {k: kwargs.pop(k) for k in fit_keys if k in kwargs}
    tuner = Tuner(hypermodel, **kwargs)
    tuner.search(x, y, **fit_kwargs)
    return tuner
