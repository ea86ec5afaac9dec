"""`Experiment.restore`: resume a run folder's backup, checked as the command line checks it.

`Resuming` is a base of `kdist.Experiment` (`kdist.experiment.job`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from kdist.engine import Controller
from kdist.experiment import outputs
from kdist.run_setup import RunSetup
from kdist.runs import resume_check
from kdist.runs.layout import SAVE_FOLDERS

__all__ = ["Resuming"]

log = logging.getLogger(__name__)


class Resuming:
    """`Experiment`'s resume from its run folder (a base class)."""

    cfg: DictConfig
    run_dir: Path
    output_dir: Path
    is_chief: bool
    steps_per_epoch: int
    setup: RunSetup

    def _controller(self) -> Controller:
        raise NotImplementedError  # `Experiment._controller`

    def restore(self) -> int:
        """Resume from `<run_dir>/backup` (else `checkpoints/`): `Controller.restore`.

        The folder's checkpoints are first checked as the command line checks them
        (`kdist.runs.resume_check.check_resume`): the same refusals and allowed changes.

        Returns:
            The global step to continue from (0 when there is nothing to restore).

        Raises:
            ConfigError: naming the changed keys when the checkpoints were trained with
                other settings (unless `trainer.allow_resume_changes=true`).
        """
        if not self.setup.resumed_in(self.run_dir):
            # The command line's resume check (made there before the job, under the
            # folder's lock), before this run's config is written over the folder's: a
            # changed setting is refused in one line, one allowed by
            # `trainer.allow_resume_changes` is applied after the restore (below).
            self.setup = self.setup.checked_in(self.run_dir)
        assert self.setup.resume is not None
        changed = self.setup.resume.changed
        accepted = resume_check.accepted_message(changed)
        if accepted is not None:
            log.warning("%s", accepted)  # in the run's log: Hydra's job logging is set up
        controller = self._controller()
        if self.is_chief:
            outputs.write_config(self.output_dir, self.cfg)
            if resume_check.holds_checkpoints(self.run_dir):
                resume_check.save_config(self.run_dir, self.cfg)
        # A change allowed on resume is applied after the restore (`kdist.runs.resume_check`).
        configured = resume_check.optimizer_hyperparameters(controller.model.optimizer)
        step = controller.restore(
            *(self.run_dir / folder for folder in SAVE_FOLDERS), clean=self.is_chief
        )
        if step:
            resume_check.apply_allowed_changes(changed, controller.model.optimizer, configured)
        if step and self.is_chief:
            outputs.trim_history(self.output_dir, step // self.steps_per_epoch)
        return step
