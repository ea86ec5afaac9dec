"""`summary.csv` for Hydra multiruns: one row per job, in the sweep folder.

`conf/train.yaml` registers `SummaryCallback` under `hydra.callbacks`, so

```bash
python -m kdist.train -m optimizer.learning_rate=1e-3,3e-3 model=mlp,cnn
```

leaves `multirun/<date>/<time>/summary.csv` beside the 4 job folders, with each job's
swept values, status, objective and final metrics, and `summary.png`, the objective
against each swept key (`kdist.runs.plots.sweep_figure`). The files are rewritten after
every job (so a sweep that stops half-way still has them) and once more when the sweep
ends, which prints where they are and names the best job.

The same holds on Hydra's launchers that run the jobs in other processes (`joblib`,
`submitit_local`, `submitit_slurm`): the callback's `on_job_end` runs in the process that ran
the job, which records the job's row (status, error, objective) in `.jobs/<num>.json` of the
sweep folder; the sweep's own process reads these records back at the end.

`train_job` reads once what Hydra says of a `kdist.train` job (its overrides, its place in
the sweep) for the run's setup (`kdist.run_setup.RunSetup.job`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from kdist.compat.tools_private import job_return_value
from kdist.config.yaml_limits import load_yaml
from kdist.runs.fileio import read_text_limited, write_csv_atomic, write_text_atomic
from kdist.runs.layout import METRICS, SUMMARY, TENSORBOARD
from kdist.runs.sweep_board import job_label, sweep_board, swept_keys

__all__ = [
    "JOBS",
    "SummaryCallback",
    "SweepJob",
    "TrainJob",
    "best_row",
    "plot_table",
    "set_chief",
    "summary_row",
    "sweep_log_keys",
    "train_job",
    "where_message",
]

log = logging.getLogger(__name__)

# Whether this process's job task is its cluster's chief: `kdist.train.run` says (through
# `set_chief`) before the job trains; `kdist.cluster` is not imported here (it imports runs).
_CHIEF = [True]


def set_chief(is_chief: bool) -> None:
    """Tell the summary whether this process's task records its job (the chief only)."""
    _CHIEF[0] = bool(is_chief)


# The sweep folder's records of finished jobs, one `<num>.json` each (see the module's text).
JOBS = ".jobs"

_LEADING = ("job", "status")
_TRAILING = (
    "epochs",
    "steps",
    "wall_seconds",
    "examples_per_sec",
    "strategy",
    "num_replicas",
    "error",
    "overrides",
    "run_dir",
)


def _override_columns(overrides: Sequence[str]) -> dict[str, str]:
    """`key=value` overrides as columns (`+`/`++` prefixes dropped, `~key` skipped)."""
    columns: dict[str, str] = {}
    for text in overrides:
        key, sep, value = text.partition("=")
        if not sep or key.startswith("~"):
            continue
        columns[key.lstrip("+")] = value
    return columns


def _metrics_columns(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The final metrics of a run's `metrics.json` as flat columns."""
    columns: dict[str, Any] = {}
    objective = metrics.get("objective") or {}
    if objective:
        columns["objective"] = objective.get("value")
        columns["objective_name"] = objective.get("name")
        # The objective's own direction (`objective.direction`): what the plot calls best.
        columns["objective_direction"] = objective.get("direction")
    for name, value in (metrics.get("validation") or {}).items():
        columns[f"val_{name}"] = value
    for name, value in (metrics.get("train") or {}).items():
        columns[name] = value
    for key in ("epochs", "steps", "wall_seconds", "examples_per_sec", "strategy"):
        if key in metrics:
            columns[key] = metrics[key]
    if "num_replicas" in metrics:
        columns["num_replicas"] = metrics["num_replicas"]
    return columns


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(read_text_limited(path)))  # bounded: a planted file
    except (OSError, ValueError):
        return {}


def summary_row(
    run_dir: Path,
    *,
    sweep_dir: Path,
    overrides: Sequence[str],
    job: int | None = None,
    status: str | None = None,
    error: str | None = None,
    objective: Any = None,
) -> dict[str, Any]:
    """One job's row: its swept values, status, objective and final metrics.

    Args:
        run_dir: the job's output folder (holding `metrics.json` when it finished).
        sweep_dir: the multirun's sweep folder; `run_dir` is shown relative to it.
        overrides: the job's task overrides, e.g. `["model=cnn", "trainer.epochs=3"]`.
        job: the job's number. Defaults to `None`.
        status: `COMPLETED`, `FAILED`, ... Defaults to `None`: `COMPLETED` when
            `metrics.json` exists, else `UNKNOWN`.
        error: one line saying why the job failed. Defaults to `None`.
        objective: the value the app returned. Defaults to `None`: the one in
            `metrics.json`.

    Returns:
        A mapping of column name to value.
    """
    metrics = _read_json(run_dir / METRICS)
    row: dict[str, Any] = {
        "job": job,
        "status": status or ("COMPLETED" if metrics else "UNKNOWN"),
    }
    row.update(_override_columns(overrides))
    row.update(_metrics_columns(metrics))
    if objective is not None and isinstance(objective, (int, float)):
        row["objective"] = float(objective)
    row["error"] = error or ""
    row["overrides"] = " ".join(overrides)
    try:
        row["run_dir"] = str(run_dir.resolve().relative_to(sweep_dir.resolve()))
    except ValueError:
        row["run_dir"] = str(run_dir)
    return row


def _columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = dict.fromkeys(_LEADING)
    for row in rows:
        seen.update(dict.fromkeys(k for k in row if k not in _TRAILING))
    seen.update(dict.fromkeys(_TRAILING))
    return list(seen)


def plot_table(path: Path, **kwargs: Any) -> None:
    """Draw the sweep plot (objective per job or trial) next to a summary or trials table.

    A plot is a convenience: failing to draw one (no finished job yet) is logged, never
    raised, so it cannot stop a sweep.
    """
    from kdist.runs.plots import write_sweep

    try:
        write_sweep(path, **kwargs)
    except Exception as error:  # matplotlib and empty tables raise several types
        log.info("no sweep plot for %s yet: %s", path.name, error)


def _record(sweep_dir: Path, row: Mapping[str, Any]) -> None:
    """Keep a finished job's row where the sweep's own process finds it (`JOBS`)."""
    name = f"{row['job']}.json" if row.get("job") is not None else None
    if name is None:
        return
    try:
        write_text_atomic(sweep_dir / JOBS / name, json.dumps(dict(row), default=str))
    except OSError as error:  # the summary still has the job's folder (status UNKNOWN)
        log.warning("could not record job %s in %s: %s", row["job"], sweep_dir / JOBS, error)


def sweep_log_keys(sweep_dir: Path) -> list[str]:
    """Keys the sweeper samples on a log scale (`tag(log, ...)` in `hydra.sweeper.params`)."""
    try:
        saved = load_yaml(sweep_dir / "multirun.yaml", key="hydra.sweep.dir") or {}
        params = ((saved.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    except Exception:  # no multirun.yaml (a hand-made table), or not a mapping
        return []
    if not isinstance(params, Mapping):
        return []
    return [str(key) for key, text in params.items() if "tag(log" in str(text).replace(" ", "")]


def _records(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    """Rows the processes that ran the jobs recorded (`_record`), by the job folder's path."""
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted((sweep_dir / JOBS).glob("*.json")):
        row = _read_json(path)
        if row.get("run_dir") is not None:
            rows[str((sweep_dir / str(row["run_dir"])).resolve())] = row
    return rows


def _scan(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    """Rows for the job folders found on disk (jobs another launcher ran elsewhere)."""
    rows: dict[str, dict[str, Any]] = {}
    for overrides_file in sorted(sweep_dir.glob("*/.hydra/overrides.yaml")):
        run_dir = overrides_file.parent.parent
        try:
            # Plain YAML within the limits: an override is text, never resolved here.
            overrides = [str(o) for o in load_yaml(overrides_file, key="hydra.sweep.dir") or []]
        except Exception:  # a half-written file of a job that is still starting
            continue
        job = int(run_dir.name) if run_dir.name.isdigit() else None
        rows[str(run_dir.resolve())] = summary_row(
            run_dir, sweep_dir=sweep_dir, overrides=overrides, job=job
        )
    return rows


class SummaryCallback(Callback):
    """A Hydra callback writing `summary.csv` in a multirun's sweep folder.

    Registered in `conf/train.yaml` as `hydra.callbacks.summary`; single runs are left
    alone. Rows come from the jobs this process ran (with their status and error), from
    the records of jobs other processes ran (`JOBS`: joblib's and submitit's launchers)
    and from the job folders found in the sweep folder. In a job that is itself a cluster
    (submitit's `tasks_per_node`), only the chief task records and writes.

    Args:
        filename: the file's name in the sweep folder. Defaults to `"summary.csv"`.
    """

    def __init__(self, *, filename: str = SUMMARY):
        if not filename or Path(filename).name != filename:
            raise ValueError(f"`filename` ({filename!r}) must be a plain file name.")
        self.filename = filename
        self._rows: dict[str, dict[str, Any]] = {}
        self._sweep_dir: Path | None = None
        # The sweep's own process (a launcher pickles this object into the jobs' processes).
        self._sweep_pid: int | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra's sweepers raise a failed job's error once the jobs have returned, and
        # then skip `on_multirun_end`: the summary of every job is written at exit instead.
        self._sweep_dir = Path(str(config.hydra.sweep.dir))
        self._sweep_pid = os.getpid()
        atexit.register(self._end_after_failure)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        hydra_cfg = config.get("hydra")
        if hydra_cfg is None or hydra_cfg.get("mode") != RunMode.MULTIRUN:
            return
        if not _CHIEF[0]:
            return  # another task of a multi-task job: the chief records the job
        run_dir = Path(hydra_cfg.runtime.output_dir)
        sweep_dir = Path(hydra_cfg.sweep.dir)
        failed = job_return.status == JobStatus.FAILED
        # `JobReturn.return_value` re-raises a failed job's exception; read the field.
        value = job_return_value(job_return)
        error = None
        if failed:
            lines = [line.strip() for line in str(value).splitlines() if line.strip()]
            error = f"{type(value).__name__}: {' '.join(lines)}"[:500]
        row = summary_row(
            run_dir,
            sweep_dir=sweep_dir,
            overrides=list(hydra_cfg.overrides.task),
            job=int(hydra_cfg.job.num),
            status=job_return.status.name,
            error=error,
            objective=None if failed else value,
        )
        self._rows[str(run_dir.resolve())] = row
        _record(sweep_dir, row)
        # A launcher's worker process leaves the plot to the sweep's own process: drawing it
        # would import matplotlib in every worker (and log there while the table has no
        # objective yet). Its copy of this object was pickled after `on_multirun_start`.
        self._write(sweep_dir, plot=self._sweep_pid == os.getpid())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._sweep_dir = None
        self._finish(Path(config.hydra.sweep.dir))

    def _end_after_failure(self) -> None:
        if self._sweep_dir is not None:
            self._finish(self._sweep_dir)
            self._sweep_dir = None

    def _finish(self, sweep_dir: Path) -> None:
        if sweep_dir.is_dir():
            rows = self._write(sweep_dir)
            # Printed, not logged: the logging set up by the last job writes to its train.log.
            print(where_message(sweep_dir / self.filename, rows), flush=True)

    def _write(self, sweep_dir: Path, *, plot: bool = True) -> list[dict[str, Any]]:
        rows = {**_scan(sweep_dir), **_records(sweep_dir), **self._rows}
        ordered = sorted(
            rows.values(), key=lambda r: (r["job"] is None, r["job"] or 0, r["run_dir"])
        )
        path = sweep_dir / self.filename
        write_csv_atomic(path, ordered, _columns(ordered))
        log.debug("wrote %s (%d rows)", path, len(ordered))
        if plot:
            plot_table(path, log_keys=sweep_log_keys(sweep_dir))
        return ordered


def where_message(path: Path, rows: Sequence[Mapping[str, Any]]) -> str:
    """The line a multirun ends with: its jobs, where `summary.csv` and its plot are.

    Args:
        path: the summary table.
        rows: its rows.
    """
    finished = sum(1 for row in rows if row.get("status") == "COMPLETED")
    plot = path.with_suffix(".png")
    shown = f", plot {plot}" if plot.is_file() else " (no plot: no job has a value to draw)"
    best = best_row(rows)
    named = ""
    if best is not None:
        name = best.get("objective_name") or "objective"
        named = f", best job {best.get('job')} ({name} {float(best['objective']):.4g})"
    message = (
        f"kdist: multirun done, {finished} of {len(rows)} job(s) completed{named}; "
        f"summary {path}{shown}"
    )
    boards = [path.parent / str(row.get("run_dir")) / TENSORBOARD for row in rows]
    if any(board.is_dir() for board in boards):
        # The sweep's board names each job by its values (`kdist.runs.sweep_board`).
        board = sweep_board(path.parent)
        logdir = board if board.is_dir() else path.parent
        message += f"; compare the jobs: tensorboard --logdir {logdir} (HParams tab)"
    return message


def best_row(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The completed job with the best objective (its own `objective_direction`), else `None`.

    Args:
        rows: `summary.csv`'s rows (or `summary_row`'s).
    """
    scored = []
    for row in rows:
        try:
            value = float(row.get("objective"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if row.get("status") == "COMPLETED" and value == value:  # NaN is no score
            scored.append((value, row))
    if not scored:
        return None
    directions = {str(row.get("objective_direction") or "max") for _, row in scored}
    pick = min if directions == {"min"} else max
    return pick(scored, key=lambda pair: pair[0])[1]


class SweepJob(NamedTuple):
    """A multirun job's place: its sweep folder, its own folder, its label and number."""

    sweep_dir: Path
    run_dir: Path
    label: str
    num: int

    @property
    def session(self) -> str:
        """Its HParams session name: the swept values, then `(<sweep folder>/<num>)`."""
        return f"{self.label} ({self.sweep_dir.name}/{self.num})"


@dataclass(frozen=True)
class TrainJob:
    """A `kdist.train` job as Hydra runs it: the command's overrides (`hydra.overrides.task`)
    and, in a multirun, its place in the sweep (`None` for a single run)."""

    overrides: tuple[str, ...]
    sweep: SweepJob | None = None


def train_job() -> TrainJob | None:
    """This process's `kdist.train` job, read from Hydra once (`kdist.train` keeps it in
    the run's setup, `RunSetup.job`), else `None`: outside a Hydra app (a
    notebook) and in `kdist.tune`, whose trials the tuner records itself."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.job.name != "train":
        return None
    overrides = tuple(str(o) for o in hydra_cfg.overrides.task)
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return TrainJob(overrides)
    sweep_dir = Path(str(hydra_cfg.sweep.dir))
    num = int(hydra_cfg.job.num)
    label = job_label(overrides, swept=swept_keys(sweep_dir), num=num)
    run_dir = Path(str(hydra_cfg.runtime.output_dir))
    return TrainJob(overrides, SweepJob(sweep_dir, run_dir, label, num))
