"""Progress bar and epoch lines (steps/s, examples/s), plain logs, batch hooks, TensorFlow's
start-up noise. Cost: ~8 s (+25 s slow)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import keras
import pytest
from helpers import compose

import kdist
from kdist.callbacks.progress import ProgressBar, epoch_line
from kdist.engine import runner
from kdist.process import quiet


def _bar_list(bar: ProgressBar, *, steps: int, verbose: int = 1) -> keras.callbacks.CallbackList:
    return keras.callbacks.CallbackList(
        [bar], add_history=False, add_progbar=True, verbose=verbose, epochs=1, steps=steps
    )


def test_progress_bar_shows_throughput_excluding_the_first_call(monkeypatch, capsys):
    now = [100.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    bar = ProgressBar(examples_per_step=32, terminal=True)
    callbacks = _bar_list(bar, steps=24)
    # Keras adds no second bar when one is in the list.
    assert sum(isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks.callbacks) == 1
    callbacks.on_train_begin()
    callbacks.on_epoch_begin(0)
    # The first call (8 steps) takes 10 s (tracing); the next two take 1 s each.
    for seconds, last_step, loss in ((110.0, 7, 1.0), (111.0, 15, 0.9), (112.0, 23, 0.8)):
        now[0] = seconds
        callbacks.on_train_batch_end(last_step, {"loss": loss})
    assert bar.progbar.steps_per_second == pytest.approx(8.0)
    now[0] = 115.0  # validation time does not count
    callbacks.on_epoch_end(0, {"loss": 0.8, "val_loss": 0.7})
    final = capsys.readouterr().out.replace("\b", "").split("\r")[-1]
    assert "steady 8.00 steps/s, 256 examples/s" in final
    assert "loss: 0.8000" in final and "val_loss: 0.7000" in final


def test_progress_bar_one_line_per_epoch_at_verbose_2(capsys):
    bar = ProgressBar(examples_per_step=10)
    callbacks = _bar_list(bar, steps=4, verbose=2)
    callbacks.on_train_begin()
    callbacks.on_epoch_begin(0)
    for step in range(4):
        callbacks.on_train_batch_end(step, {"loss": 1.0})
    callbacks.on_epoch_end(0, {"loss": 1.0})
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert len(lines) == 1
    assert re.search(r"steady [\d.,]+ steps/s, [\d.,]+ examples/s - loss", lines[0])


def test_progress_bar_checks_its_argument():
    with pytest.raises(ValueError, match="examples_per_step"):
        ProgressBar(examples_per_step=0)


TERMINAL_CODES = re.compile(r"[\x1b\r\b]")


def test_epoch_line_is_keras_verbose_2_in_one_plain_line():
    line = epoch_line(
        epoch=1,
        epochs=3,
        step=10,
        steps=10,
        seconds=0.42,
        steps_per_second=250.0,
        examples_per_step=64,
        steady=True,
        logs={"loss": 0.45213, "val_loss": 0.0001234, "note": "text"},
    )
    assert line == (
        "Epoch 2/3 - 10/10 steps - 0.4s - steady 250 steps/s, 16,000 examples/s"
        " - loss: 0.4521 - val_loss: 1.2340e-04"
    )
    tracing = epoch_line(
        epoch=0,
        epochs=1,
        step=5,
        steps=5,
        seconds=12.3,
        steps_per_second=0.5,
        examples_per_step=32,
        steady=False,
        logs=None,
    )
    assert tracing == "Epoch 1/1 - 5/5 steps - 12s - 0.50 steps/s, 16.0 examples/s incl. first call"


def test_without_a_terminal_the_bar_is_one_plain_line_per_epoch(monkeypatch, capsys):
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    bar = ProgressBar(examples_per_step=32, terminal=False)
    callbacks = _bar_list(bar, steps=16, verbose=1)
    callbacks.set_params({"verbose": 1, "epochs": 2, "steps": 16})
    callbacks.on_train_begin()
    # Epoch 1: the first call (8 steps) traces for 10 s, the second takes 1 s; then 3 s
    # of validation. Epoch 2: two calls of 0.5 s.
    for epoch, calls, end in ((0, ((0, 10.0), (8, 11.0)), 14.0), (1, ((0, 14.5), (8, 15.0)), 15.0)):
        callbacks.on_epoch_begin(epoch)
        for first_step, done_at in calls:
            callbacks.on_train_batch_begin(first_step)
            now[0] = done_at
            callbacks.on_train_batch_end(first_step + 7, {"loss": 1.0})
        now[0] = end
        callbacks.on_epoch_end(epoch, {"loss": 0.5, "val_loss": 0.25})
    out = capsys.readouterr().out
    assert not TERMINAL_CODES.search(out)
    assert out.splitlines() == [
        "Epoch 1/2 - 16/16 steps - 14s - steady 8.00 steps/s, 256 examples/s"
        " - loss: 0.5000 - val_loss: 0.2500",
        "Epoch 2/2 - 16/16 steps - 1.0s - steady 16.0 steps/s, 512 examples/s"
        " - loss: 0.5000 - val_loss: 0.2500",
    ]


def test_a_train_log_redirected_to_a_file_holds_no_terminal_code(tmp_path: Path):
    log = tmp_path / "train.out"
    with log.open("w") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "kdist.train", "trainer=fast_dev", "trainer.epochs=3"],
            cwd=tmp_path,
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    text = log.read_text()
    assert not TERMINAL_CODES.search(text), repr(text)
    epochs = [line for line in text.splitlines() if line.startswith("Epoch ")]
    assert [line.split(" - ")[0] for line in epochs] == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]
    assert all(re.search(r" - steady [\d.,]+ steps/s, [\d,.]+ examples/s - ", e) for e in epochs)


def test_the_launcher_relays_worker_lines_without_terminal_codes():
    import io
    import threading
    from types import SimpleNamespace

    from kdist.launcher.tasks import Task, _pump, plain

    assert plain("\x1b[1m3/10\x1b[0m \x1b[32m━━\x1b[0m\b\b \x1b]0;title\x07ok\tdone") == (
        "3/10 ━━ ok\tdone"
    )
    # A bar drawn for a terminal: redraws end with carriage returns, codes everywhere.
    raw = b"\x1b[1m1/2\x1b[0m 1s\r\b\b\b\x1b[1m2/2\x1b[0m 2s\n\nEpoch 2/2 - ok\n"
    task = Task("worker", 1, [], {}, trains=True)
    task.process = SimpleNamespace(stdout=io.TextIOWrapper(io.BytesIO(raw), newline=None))
    output = io.StringIO()
    _pump(task, output, threading.Lock())
    assert output.getvalue().splitlines() == [
        "[worker 1] 1/2 1s",
        "[worker 1] 2/2 2s",
        "[worker 1] ",
        "[worker 1] Epoch 2/2 - ok",
    ]


def test_cluster_recipes_log_one_line_per_epoch():
    recipes = sorted((Path(__file__).parents[1] / "recipes" / "cluster").iterdir())
    trainers = [p for p in recipes if "kdist.train strategy=" in p.read_text()]
    assert len(trainers) == 7
    for path in trainers:
        assert "trainer.verbose=2" in path.read_text(), path.name


class _EveryBatch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def on_train_batch_end(self, batch, logs=None):
        self.calls += 1


def test_batch_hooks_note_names_the_hooks_and_the_fix():
    lam = keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: None)
    note = runner.batch_hook_note(
        [_EveryBatch(), lam, keras.callbacks.EarlyStopping()], steps_per_execution=8
    )
    assert note is not None
    assert note.startswith("_EveryBatch.on_train_batch_end, LambdaCallback.on_batch_end run once ")
    assert "every 8 steps" in note and "set trainer.steps_per_execution=1" in note
    assert runner.batch_hook_note([_EveryBatch()], steps_per_execution=1) is None
    assert runner.batch_hook_note([keras.callbacks.History()], steps_per_execution=8) is None

    class _Validation(keras.callbacks.Callback):
        def on_test_batch_end(self, batch, logs=None):
            pass

    # Called as Keras's evaluate calls them, except by the parameter servers' coordinator.
    assert runner.batch_hook_note([_Validation()], steps_per_execution=1) is None
    only_test = runner.batch_hook_note(
        [_Validation()], steps_per_execution=1, parameter_server=True
    )
    assert only_test == (
        "_Validation.on_test_batch_end are not called during fit under parameter servers: "
        "the coordinator validates the whole split in one call"
    )


def test_fit_into_a_pipe_prints_plain_lines_and_says_once_how_batch_hooks_run(
    tmp_path: Path, caplog, capsys
):
    # capsys's stdout is no terminal, as a file or a pod's log.
    overrides = ["trainer=fast_dev", "trainer.verbose=1", "trainer.steps_per_execution=5"]
    cfg = compose([*overrides, f"run_dir={tmp_path}"])
    exp = kdist.Experiment(cfg)
    runner._said.clear()
    first, second = _EveryBatch(), _EveryBatch()
    with caplog.at_level(logging.WARNING, logger="kdist.engine.runner"):
        exp.fit(callbacks=[first])
        exp.fit(epochs=1, callbacks=[second])
    out = capsys.readouterr().out
    assert not TERMINAL_CODES.search(out)
    epochs = [line for line in out.splitlines() if line.startswith("Epoch ")]
    # fit(epochs=1) again numbers its epoch as Keras's second fit does: 1/1.
    assert [line.split(" - ")[0] for line in epochs] == ["Epoch 1/2", "Epoch 2/2", "Epoch 1/1"]
    assert all(" examples/s" in line and " val_loss: " in line for line in epochs)
    # 5 steps an epoch in one call: each fit's first call is a whole epoch.
    assert "examples/s incl. first call - " in epochs[0]
    assert " - steady " in epochs[1] and "examples/s incl. first call - " in epochs[2]
    notes = [r.getMessage() for r in caplog.records if r.name == "kdist.engine.runner"]
    assert len(notes) == 1, notes
    assert "_EveryBatch.on_train_batch_end run once every 5 steps" in notes[0]
    assert (first.calls, second.calls) == (2, 1)


def test_filtered_stderr_drops_only_matching_lines(capfd):
    with quiet.filtered_stderr([re.compile("noise")]):
        # File descriptor 2, as TensorFlow's C++ code writes it.
        os.write(2, b"some noise here\nkeep this\n")
        os.write(2, b"and this\n")
    assert capfd.readouterr().err == "keep this\nand this\n"


def test_tensorflows_start_up_info_lines_are_noise_and_warnings_are_not(capfd):
    # The lines TensorFlow 2.21 prints at `import tensorflow` and on first device use,
    # before TF_CPP_MIN_LOG_LEVEL applies, and two it prints once logging is set up.
    one_dnn = (
        "I0000 00:00:1795607884.489335   23610 port.cc:153] oneDNN custom operations are on. "
        "You may see slightly different numerical results due to floating-point round-off "
        "errors from different computation orders. To turn them off, set the environment "
        "variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
    )
    no_driver = (
        "I0000 00:00:1795607489.696636   21265 cudart_stub.cc:31] Could not find cuda "
        "drivers on your machine, GPU will not be used.\n"
    )
    warning = "W0000 00:00:1795607489.7   21265 gpu_device.cc:2431] Cannot dlopen some GPU\n"
    user = "I0000 is not how this user's own line starts with a bracket]\n"
    with quiet.filtered_stderr(quiet.stderr_noise()):
        os.write(2, (one_dnn + no_driver + warning + one_dnn + user).encode())
    assert capfd.readouterr().err == warning + user


def test_an_explicit_log_level_wins(monkeypatch):
    monkeypatch.setattr(quiet, "_level_set_by_kdist", False)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    quiet.set_level(3)
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert not quiet.enabled()
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    quiet.set_level(2)  # kdist's default ...
    quiet.set_level(1)  # ... which a run's runtime.tf_log_level may replace
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
    assert quiet.enabled()


NOISE = re.compile(
    r"absl::InitializeLog|cudart_stub|failed call to cuInit|oneDNN custom operations", re.M
)


@pytest.mark.slow  # the fast suite sees the same in the quickstart notebook's clean stderr
def test_kdist_quiet_tensorflow_silences_tensorflows_start_up_lines():
    # The notebook's explicit call (`import kdist` alone changes nothing), then TensorFlow
    # starts and kdist sets up the devices, as in a notebook.
    code = (
        "import kdist; kdist.quiet_tensorflow(); import tensorflow as tf; "
        "from kdist.process import quiet, runtime; "
        "runtime.setup(kdist.compose().runtime); tf.constant(1.0) + 1; "
        "print('dropped the no-driver lines:', quiet._seen_no_driver)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert not NOISE.search(result.stderr), result.stderr
    # On a machine without a CUDA driver (this one, CI) the lines were there and dropped.
    if "True" not in result.stdout:
        pytest.skip("a CUDA driver is present: TensorFlow printed no start-up lines to drop")
