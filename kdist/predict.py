"""`python -m kdist.predict run_dir=...`: a finished run's predictions, in `predictions.npz`.

The run's config rebuilds the strategy and the input pipeline; the model is the run's
`model.keras`, loaded in Keras safe mode. The predictions are made batch by batch under
the strategy (`kdist.experiment.predicting`) and written to `<run_dir>/predictions.npz`: the array
`predictions` (or `predictions_<output>` for each output of a model with several), one
row per example, in the order of the data.

Arguments:
- `split=validation` (default) or `split=train`: predict on that split of the run's data;
- `input=FILE.npz`: predict on the features of another file instead (the arrays named
  by the run's `data.source.x_key`, `x` by default);
- `output=FILE.npz`: write there instead of the run folder;
- `trust_run_dir=true`: rebuild a config that names code outside kdist and Keras (a
  `model=custom` run, say); without it such a run folder is refused, as by
  `kdist.evaluate`;
- any other `key=value` or `group=option` overrides the run's config, as for
  `kdist.evaluate`. Multi-worker and parameter-server runs predict in one process
  (`strategy=one_device`, logged), which needs no cluster.

Example:

```bash
python -m kdist.predict run_dir=outputs/2026-11-21/10-00-00
python -m kdist.predict run_dir=outputs/2026-11-21/10-00-00 input=new.npz output=new_preds.npz
```
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kdist.command import help_from_docstring, prepare_command
from kdist.config.errors import ConfigError, exit_with
from kdist.config.trust import TRUST_FLAG
from kdist.evaluation.reopen import experiment_with_run_model, in_one_process, load_trusted_config
from kdist.process.runtime import quiet_tensorflow
from kdist.runs import lock as run_lock
from kdist.runs.fileio import atomic_path
from kdist.runs.layout import PREDICTIONS

__all__ = ["main", "predict_run"]


def predict_run(
    run_dir: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    *,
    split: str = "validation",
    input_path: str | None = None,
    output_path: str | None = None,
    trust_run_dir: bool = False,
) -> Path:
    """Predict with a finished run's `model.keras` and write `predictions.npz`.

    Args:
        run_dir: the run's output folder.
        overrides: `key=value` or `group=option` changes to the run's config.
            Defaults to `()`.
        split: the split of the run's data to predict on. Defaults to `"validation"`.
        input_path: an `.npz` file whose features to predict on instead. Defaults to
            `None`.
        output_path: where to write. Defaults to `None`: `<run_dir>/predictions.npz`.
        trust_run_dir: rebuild the config even when a `_target_` names code outside
            kdist and Keras (as for `kdist.evaluate`). Defaults to `False`.

    Returns:
        The path written.

    Raises:
        ConfigError: naming `run_dir`, `split`, `input` or the key at fault.
    """
    cfg = load_trusted_config(run_dir, overrides, trust_run_dir=trust_run_dir)
    in_one_process(cfg, why="predicting in one process")
    # One owner per folder: writing into the run folder, it holds the folder's lock as
    # `kdist.train` does (refused while a run trains there; a run waits for it).
    owns = output_path is None
    with run_lock.hold(run_dir, key="run_dir", enabled=owns, read_only_hint=_READ_ONLY_HINT):
        return _predict_into(run_dir, cfg, split, input_path, output_path)


def _predict_into(
    run_dir: str | os.PathLike[str],
    cfg: Any,
    split: str,
    input_path: str | None,
    output_path: str | None,
) -> Path:
    experiment = experiment_with_run_model(run_dir, cfg)
    x = _features(cfg, input_path) if input_path else None
    if x is not None:
        _check_shapes(experiment.model, x, input_path)
    predictions = experiment.predict(x, split=split)
    destination = Path(output_path) if output_path else Path(run_dir) / PREDICTIONS
    arrays = (
        {f"predictions_{name}": value for name, value in predictions.items()}
        if isinstance(predictions, Mapping)
        else {"predictions": predictions}
    )
    try:
        with atomic_path(destination) as partial:
            np.savez(partial, **arrays)
    except PermissionError as error:  # EACCES, EPERM (a read-only or immutable folder)
        raise _cannot_write(destination, output_path, error) from None
    except OSError as error:
        if error.errno != errno.EROFS:
            raise
        raise _cannot_write(destination, output_path, error) from None
    return destination


def _cannot_write(destination: Path, output_path: str | None, error: OSError) -> ConfigError:
    """One line for a destination that is read-only, naming the key that chose it."""
    key, value = ("output", output_path) if output_path else ("run_dir", str(destination.parent))
    return ConfigError(
        key,
        f"is read-only: {destination.name} cannot be written there "
        f"({os.strerror(error.errno or 0)})",
        value=value,
        hint=_READ_ONLY_HINT if not output_path else "choose a writable output=PATH",
    )


# What to do with a run folder that cannot be written.
_READ_ONLY_HINT = "copy the folder somewhere writable, or write elsewhere with output=PATH"


def _check_shapes(model: Any, x: Any, path: str | None) -> None:
    """Refuse features whose shape the model does not take, naming `input` and both shapes."""
    inputs = list(getattr(model, "inputs", None) or [])
    given = list(x.values()) if isinstance(x, Mapping) else [x]
    names = list(x) if isinstance(x, Mapping) else [None]
    if len(inputs) != len(given):
        return  # a model without symbolic inputs (subclassed): Keras checks it
    for name, array, spec in zip(names, given, inputs, strict=True):
        expected = tuple(spec.shape[1:])
        shape = tuple(np.shape(array)[1:])
        fits = len(shape) == len(expected) and all(
            e is None or e == s for e, s in zip(expected, shape, strict=True)
        )
        if not fits:
            what = f"features {name!r}" if name else "features"
            raise ConfigError(
                "input",
                f"has {what} of shape {shape} per example; the model takes "
                f"{tuple('?' if e is None else e for e in expected)}",
                value=path,
            )


def _check_rows(name: str, array: np.ndarray, path: str) -> None:
    """Refuse features the model cannot predict on: no rows, or not numbers."""
    if array.dtype.kind not in "biuf":
        raise ConfigError(
            "input",
            f"has features {name!r} of type {array.dtype} (not numbers); the model takes numbers",
            value=path,
            hint="encode text and categories as the run's data source did",
        )
    if array.ndim == 0 or array.shape[0] == 0:
        raise ConfigError(
            "input",
            f"has no rows in {name!r} (shape {array.shape}): nothing to predict",
            value=path,
        )


def _features(cfg: Any, path: str) -> Any:
    from kdist.data.files import model_array
    from kdist.data.npz_source import load_arrays

    source = cfg.data.get("source") or {}
    x_key = source.get("x_key", "x") if str(source.get("_target_")) == "kdist.data.npz" else "x"
    names = [str(k) for k in x_key] if not isinstance(x_key, str) else [x_key]
    arrays = load_arrays("input", path, tuple(names))
    for name, array in zip(names, arrays, strict=True):
        _check_rows(name, np.asarray(array), path)
    scale = source.get("scale")
    arrays = [model_array(a, scale) for a in arrays]
    return dict(zip(names, arrays, strict=True)) if not isinstance(x_key, str) else arrays[0]


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.predict run_dir=... [split=...] [input=...] [...]`."""
    prepare_command()  # saved configs may name module paths that moved
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(help_from_docstring(__doc__, "kdist.predict"))
        raise SystemExit(0)
    options: dict[str, list[str]] = {
        "run_dir": [],
        "split": [],
        "input": [],
        "output": [],
        TRUST_FLAG: [],
    }
    overrides = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key in options:
            options[key].append(value)
        else:
            overrides.append(arg)
    if len(options["run_dir"]) != 1 or not options["run_dir"][0]:
        exit_with(ConfigError("run_dir", "is required once", hint="run_dir=outputs/DATE/TIME"))
    trust = options[TRUST_FLAG]
    if any(value.lower() not in ("true", "false") for value in trust):
        exit_with(ConfigError(TRUST_FLAG, "must be true or false", value=trust[-1]))
    quiet_tensorflow()
    try:
        written = predict_run(
            options["run_dir"][0],
            overrides,
            split=(options["split"] or ["validation"])[-1],
            input_path=options["input"][-1] if options["input"] else None,
            output_path=options["output"][-1] if options["output"] else None,
            trust_run_dir=bool(trust) and trust[-1].lower() == "true",
        )
    except ConfigError as error:
        exit_with(error)
    print(f"predictions: {written}", flush=True)


if __name__ == "__main__":
    main()
