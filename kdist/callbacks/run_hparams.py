"""`RunHParams`: a run's TensorBoard HParams session, so runs compare as tuner trials do.

Every `kdist.train` run with TensorBoard on records the keys its command overrode (Hydra's
task overrides: the swept ones in a multirun) and its final metrics, the objective among
them, in `tensorboard/` of its run folder, with the tuner's writer
(`kdist.runs.hparams.write_session`). Then

```bash
python -m kdist.train -m optimizer.learning_rate=1e-3,3e-3 model=mlp,cnn
tensorboard --logdir multirun/<date>/<time>      # the HParams tab: one row per job
```

compares the jobs as `tensorboard --logdir <run_dir>/trials` compares a search's trials.
A multirun job's session is named by what it sweeps (`optimizer.learning_rate=0.003
(10-00-00/1)`: the values first, then the sweep folder's name and the job's number, so
two sweeps under one `--logdir` stay two rows), and its folder is linked into the sweep's
`tensorboard/` under the same values (`kdist.runs.sweep_board`): `tensorboard --logdir
multirun/<date>/<time>/tensorboard` names the scalar runs `optimizer.learning_rate=0.003/train`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.runs.hparams import write_session
from kdist.runs.sweep import SweepJob
from kdist.runs.sweep_board import link_job_board

__all__ = ["RunHParams", "overridden_values", "session_name"]

log = logging.getLogger(__name__)

Scalar = bool | int | float | str


def overridden_values(overrides: Sequence[str], cfg: Any) -> dict[str, Scalar]:
    """The keys `overrides` set, each with its value in the run's config `cfg`.

    A key that holds a number, a string or a bool in `cfg` shows that value (so
    `optimizer.learning_rate=1e-3` is the float `0.001`); a config group choice
    (`model=cnn`), a list or a deleted key shows the override's text. `hydra.*` keys
    and deletions (`~key`) are left out.

    Args:
        overrides: Hydra's task overrides, e.g. `["model=cnn", "trainer.epochs=3"]`.
        cfg: the run's config.

    Returns:
        Key -> value, in the overrides' order.
    """
    values: dict[str, Scalar] = {}
    for text in overrides:
        key, sep, value = str(text).partition("=")
        key = key.lstrip("+")
        if not sep or key.startswith("~") or key.startswith("hydra."):
            continue
        try:
            found = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        except Exception:  # an interpolation that does not resolve, a bad key
            found = None
        if isinstance(found, (DictConfig, ListConfig)) or found is None:
            values[key] = value  # a group's choice, a list, a key set to null
        elif isinstance(found, float) and not math.isfinite(found):
            values[key] = str(found)  # TensorBoard keeps no NaN or infinity
        elif isinstance(found, (bool, int, float, str)):
            values[key] = found
        else:
            values[key] = str(found)
    return values


def session_name(run_dir: str | Path, *, root: str | Path | None = None) -> str:
    """A run's HParams session name: its folder relative to `root`, else its absolute path.

    The name groups a session's rows in TensorBoard: two runs with one name are merged
    into one row (their values averaged). A multirun job's number or a run's time repeats
    between sweeps, the folder's path does not (`multirun/2026-11-26/10-00-00/0`).

    Args:
        run_dir: the run's folder.
        root: where `tensorboard --logdir` is likely pointed. Defaults to `None`: the
            working directory (where Hydra's `outputs/` and `multirun/` are).
    """
    folder = Path(run_dir).resolve()
    try:
        return folder.relative_to(Path(root or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return folder.as_posix()


class RunHParams(keras.callbacks.Callback):
    """Write the run's HParams session (its overridden keys, its final metrics) at the end.

    Args:
        log_dir: the run's TensorBoard folder (`<run_dir>/tensorboard`).
        hparams: key -> value (see `overridden_values`).
        session: the session's name in TensorBoard. Defaults to `None`: in a multirun
            job, its swept values and place (`SweepJob.session`); else the run folder
            (`log_dir`'s parent) as `session_name` gives it.
        objective: the metric the run is judged by (`objective.name`), declared first
            among the session's metrics. Defaults to `None`: none declared.
        job: the run's place in a multirun (`RunSetup.job.sweep`). Defaults
            to `None`: a single run.
    """

    def __init__(
        self,
        *,
        log_dir: str | Path,
        hparams: Mapping[str, Scalar],
        session: str | None = None,
        objective: str | None = None,
        job: SweepJob | None = None,
    ):
        super().__init__()
        self.log_dir = Path(log_dir)
        self.hparams = dict(hparams)
        self._job = job if session is None else None
        if session is None:
            session = self._job.session if self._job else session_name(self.log_dir.parent)
        self.session = session
        self.objective = objective
        self._started = time.time()
        self._epochs = 0
        self._logs: dict[str, Any] = {}

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._started = time.time()
        if self._job is not None:
            # Named in the sweep's board while it trains (`kdist.runs.sweep_board`).
            link_job_board(self._job.sweep_dir, self._job.run_dir, self._job.label)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epochs = epoch + 1
        self._logs.update(logs or {})

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        metrics = {}
        for name, value in {**self._logs, **(logs or {})}.items():
            try:
                metrics[name] = float(value)
            except (TypeError, ValueError):
                continue
        try:
            write_session(
                self.log_dir,
                trial_id=self.session,
                hparams=self.hparams,
                metrics=metrics,
                step=self._epochs,
                started=self._started,
                objective=self.objective,
            )
        except Exception as error:  # TensorBoard's record must not fail a finished run
            log.warning("no TensorBoard HParams written in %s: %s", self.log_dir, error)
