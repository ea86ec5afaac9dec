"""Helpers shared by the tests.

In-process tests split the CPU into 2 logical devices once per session (TensorFlow allows
that only before it initialises), so one_device and mirrored tests can run in the same
process; every in-process config therefore sets runtime.logical_devices=2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
LOGICAL = "runtime.logical_devices=2"


def compose(overrides: Sequence[str] = (), **kwargs):
    """`kdist.compose` with the session's logical-device split added."""
    import kdist

    return kdist.compose([LOGICAL, *overrides], **kwargs)


def run_module(
    module: str, args: Sequence[str], *, cwd: Path, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m module args` in `cwd`; bounded by `timeout` seconds."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def only_run_dir(root: Path) -> Path:
    """The single run directory Hydra made under `root/outputs`."""
    runs = [p for p in (root / "outputs").glob("*/*") if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def tiny_model(*, input_shape, num_classes, width: int = 16):
    """A user model callable for `model=custom` tests."""
    import keras

    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(width, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def not_a_model(*, input_shape, num_classes):
    """Returns the wrong type, for the factory's error."""
    return "model"


def make_recorder():
    """A Keras callback that records every hook call as (hook, index)."""
    import keras

    class Recorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.calls: list[tuple[str, int | None]] = []
            self.epoch_logs: list[dict] = []

        def on_train_begin(self, logs=None):
            self.calls.append(("train_begin", None))

        def on_train_end(self, logs=None):
            self.calls.append(("train_end", None))

        def on_epoch_begin(self, epoch, logs=None):
            self.calls.append(("epoch_begin", epoch))

        def on_epoch_end(self, epoch, logs=None):
            self.calls.append(("epoch_end", epoch))
            self.epoch_logs.append(dict(logs or {}))

        def on_train_batch_begin(self, batch, logs=None):
            self.calls.append(("batch_begin", batch))

        def on_train_batch_end(self, batch, logs=None):
            self.calls.append(("batch_end", batch))

        def on_test_begin(self, logs=None):
            self.calls.append(("test_begin", None))

        def on_test_end(self, logs=None):
            self.calls.append(("test_end", None))

        def count(self, hook: str) -> int:
            return sum(1 for name, _ in self.calls if name == hook)

    return Recorder()


class StopAfterEpoch:
    """Factory target for `callbacks.extra`: a callback that stops after epoch `epoch`."""

    def __new__(cls, *, epoch: int = 0):
        import keras

        class _Stop(keras.callbacks.Callback):
            def on_epoch_end(self, index, logs=None):
                if index >= epoch:
                    self.model.stop_training = True

        return _Stop()
