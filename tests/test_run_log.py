"""`train.log` holds the per-epoch lines standard output shows; a single run ends by
printing its folder (as a multirun ends with its summary's). Cost: one 10-step run."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from helpers import run_module

from kdist.runs.log_file import to_log_files


def test_train_log_holds_the_epoch_lines_and_a_run_prints_its_folder(tmp_path: Path):
    run_dir = tmp_path / "run"
    done = run_module(
        "kdist.train",
        ["trainer=fast_dev", "trainer.verbose=2", "callbacks=minimal", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown = [line for line in done.stdout.splitlines() if line.startswith("Epoch ")]
    assert [line.split(" - ")[0] for line in shown] == ["Epoch 1/2", "Epoch 2/2"]
    log = (run_dir / "train.log").read_text().splitlines()
    logged = [line.split(" INFO ", 1)[1] for line in log if " INFO Epoch " in line]
    assert logged == shown  # the same lines, each once
    assert done.stdout.strip().splitlines()[-1] == f"kdist: run done; its folder {run_dir}"


def test_a_line_goes_to_the_log_files_only(tmp_path: Path):
    root = logging.getLogger()
    console = io.StringIO()
    handlers = [logging.StreamHandler(console), logging.FileHandler(tmp_path / "train.log")]
    quiet = logging.FileHandler(tmp_path / "warnings.log")
    quiet.setLevel(logging.WARNING)
    for handler in [*handlers, quiet]:
        root.addHandler(handler)
    try:
        to_log_files("Epoch 1/2 - 5/5 steps")
    finally:
        for handler in [*handlers, quiet]:
            root.removeHandler(handler)
            handler.close()
    assert "Epoch 1/2 - 5/5 steps" in (tmp_path / "train.log").read_text()
    assert console.getvalue() == ""  # stdout already showed it
    assert (tmp_path / "warnings.log").read_text() == ""  # a handler's level is kept


def test_with_the_progress_bar_train_log_still_holds_the_epoch_lines(tmp_path: Path, capsys):
    """In a terminal the bar is drawn instead of the lines; `train.log` held no epoch line
    then (issue 44: it holds what stdout shows, an epoch's summary either way)."""
    import keras
    import numpy as np

    from kdist.callbacks.progress import ProgressBar

    root = logging.getLogger()
    handler = logging.FileHandler(tmp_path / "train.log")
    root.addHandler(handler)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((16, 4), "float32"), np.zeros((16, 2), "float32")
    try:
        bar = ProgressBar(examples_per_step=8, terminal=True)
        model.fit(x, y, batch_size=8, epochs=2, verbose=1, callbacks=[bar])
    finally:
        root.removeHandler(handler)
        handler.close()
    shown = capsys.readouterr().out
    assert "2/2" in shown and "Epoch 1/2 - " not in shown  # the bar, not the lines
    logged = (tmp_path / "train.log").read_text()
    assert "Epoch 1/2 - 2/2 steps" in logged and "Epoch 2/2 - 2/2 steps" in logged


def test_an_epoch_line_counts_the_epochs_steps_when_the_last_call_is_partial(capsys):
    """Keras names a partial last call's batch `begin + steps_per_execution - 1`, past the
    epoch's end: the line said `9/8 steps` (the parameter-server test's `24/22`)."""
    import keras
    import numpy as np

    from kdist.callbacks.progress import ProgressBar

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=3)
    x, y = np.zeros((16, 4), "float32"), np.zeros((16, 2), "float32")
    bar = ProgressBar(examples_per_step=2, terminal=False)
    model.fit(x, y, batch_size=2, epochs=1, verbose=1, callbacks=[bar])
    assert "Epoch 1/1 - 8/8 steps" in capsys.readouterr().out
