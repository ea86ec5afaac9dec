"""A notebook `Experiment` on a run folder resumes under the command line's rule (issue 38).

`kdist.Experiment(cfg, run_dir=OLD).fit()` applies `kdist.runs.resume_check` exactly as
`kdist.train` does: a changed learning rate or `split_seed` is refused in one line naming
the key, and `trainer.allow_resume_changes=true` resumes with the change applied.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import compose

import kdist
from kdist.config import ConfigError

TINY = ["trainer=fast_dev", "trainer.epochs=1", "trainer.verbose=0", "trainer.validation=false"]


def _experiment(run_dir: Path, *extra: str) -> kdist.Experiment:
    return kdist.Experiment(compose([*TINY, *extra]), run_dir=run_dir)


def test_a_notebook_resume_applies_the_command_lines_check(tmp_path: Path, caplog):
    run_dir = tmp_path / "run"
    _experiment(run_dir).fit()
    assert any((run_dir / "backup").glob("ckpt-*.index"))

    for changed in ("optimizer.learning_rate=0.3", "data.source.split_seed=7"):
        exp = _experiment(run_dir, changed)
        key = changed.split("=")[0]
        with pytest.raises(ConfigError, match=rf"other settings.*changed: {key};"):
            exp.fit()
        assert exp.result is None

    exp = _experiment(run_dir, "optimizer.learning_rate=0.3", "trainer.allow_resume_changes=true")
    with caplog.at_level(logging.WARNING, logger="kdist"):
        exp.fit(epochs=2)  # one epoch more, from the restored step
    assert float(exp.model.optimizer.learning_rate.numpy()) == pytest.approx(0.3)
    assert "as configured (the checkpoint held 0.001)" in caplog.text
    # The accepted settings are the folder's now: the same again resumes with no word.
    again = _experiment(run_dir, "optimizer.learning_rate=0.3")
    again.fit(epochs=3)
    assert float(again.model.optimizer.learning_rate.numpy()) == pytest.approx(0.3)
