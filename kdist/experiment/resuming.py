"""The resume of a run folder's backup, checked as the command line checks it.

`kdist.Experiment.restore` (`kdist.experiment.job`) checks the folder first (its setup's
resume decision, `kdist.run_setup`), then hands `restore` its controller.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kdist.engine import Controller
from kdist.experiment import outputs
from kdist.run_setup import RunSetup
from kdist.runs import resume_check
from kdist.runs.layout import SAVE_FOLDERS

__all__ = ["restore"]

log = logging.getLogger(__name__)


def restore(
    controller: Controller,
    setup: RunSetup,
    run_dir: Path,
    output_dir: Path,
    *,
    is_chief: bool,
    recorded: Any = None,
) -> int:
    """Resume `controller` from `<run_dir>/backup` (else `checkpoints/`), as `setup`'s
    resume decision for `run_dir` says; the step to continue from (0: a fresh start).

    `recorded` is the config as the folder records the run (`DataPlan.recorded`),
    written there; `None`: `setup.cfg`."""
    assert setup.resume is not None
    changed = setup.resume.changed
    accepted = resume_check.accepted_message(changed)
    if accepted is not None:
        log.warning("%s", accepted)  # in the run's log: Hydra's job logging is set up
    if is_chief:
        record = setup.cfg if recorded is None else recorded
        outputs.write_config(output_dir, record)
        if resume_check.holds_checkpoints(run_dir):
            resume_check.save_config(run_dir, record)
    # A change allowed on resume is applied after the restore (`kdist.runs.resume_check`).
    optimizer = controller.model.optimizer
    configured = resume_check.optimizer_hyperparameters(optimizer)
    step = controller.restore(*(run_dir / folder for folder in SAVE_FOLDERS), clean=is_chief)
    if step:
        resume_check.apply_allowed_changes(changed, optimizer, configured)
    if step and is_chief:
        outputs.trim_history(output_dir, step // controller.schedule.steps_per_epoch)
    return step
