"""Where a run writes when it is not told: `outputs/<date>/<time>`, defined once.

`kdist.experiment` (a notebook's `Experiment` without `run_dir`) and `kdist.launch` call
`default_run_dir`; `conf/train.yaml` spells the same folders with Hydra's `${now:...}`
resolver as `HYDRA_RUN_DIR` and `HYDRA_SWEEP_DIR` below, and a test checks that it does.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

__all__ = [
    "DATE_FORMAT",
    "HYDRA_RUN_DIR",
    "HYDRA_SWEEP_DIR",
    "MULTIRUN_ROOT",
    "RUN_ROOT",
    "TIME_FORMAT",
    "default_run_dir",
]

RUN_ROOT = "outputs"
MULTIRUN_ROOT = "multirun"
DATE_FORMAT = "%Y-%m-%d"
TIME_FORMAT = "%H-%M-%S"
# `hydra.run.dir` and `hydra.sweep.dir` in `conf/train.yaml`.
HYDRA_RUN_DIR = f"{RUN_ROOT}/${{now:{DATE_FORMAT}}}/${{now:{TIME_FORMAT}}}"
HYDRA_SWEEP_DIR = f"{MULTIRUN_ROOT}/${{now:{DATE_FORMAT}}}/${{now:{TIME_FORMAT}}}"


def default_run_dir(*, microseconds: bool = False, now: datetime | None = None) -> Path:
    """The run folder for a run started `now`: `outputs/<date>/<time>`, relative.

    Args:
        microseconds: add `-<microseconds>` to the time, so that several runs started in
            one second (a notebook's experiments) get folders of their own.
            Defaults to `False`.
        now: the start time. Defaults to `None`: the current local time.

    Returns:
        e.g. `Path("outputs/2026-11-21/10-00-00")`.
    """
    now = now or datetime.now()
    time_format = f"{TIME_FORMAT}-%f" if microseconds else TIME_FORMAT
    return Path(RUN_ROOT) / now.strftime(DATE_FORMAT) / now.strftime(time_format)
