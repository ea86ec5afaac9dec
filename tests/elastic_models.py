"""A model that counts the examples it trains on, for the elastic-restart tests.

Each example carries an integer id (the `id` input, from an `.npz` array). The model's
`train_step` adds one-hot(id) into a non-trainable `counts` variable of shape
`[epochs, examples]`, in the row of the epoch the current optimizer step belongs to. The
update is summed over the replicas (an all-reduce), and the variable is checkpointed with
the model: after a run restarted from backups (with any worker count) every entry is
exactly 1 when each example of each epoch was trained on exactly once.

Used as `model._target_=elastic_models.counting_model` with `tests/` on `PYTHONPATH`.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

FEATURES, CLASSES = 4, 2


def write_data(folder: Path, *, examples: int, validation: int = 16) -> tuple[Path, Path]:
    """`train.npz` (features `x`, ids `id`, labels `y`) and `validation.npz` in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for name, count in (("train", examples), ("validation", validation)):
        x = rng.normal(size=(count, FEATURES)).astype("float32")
        y = (x[:, 0] > 0).astype("int64")
        path = folder / f"{name}.npz"
        np.savez(path, x=x, id=np.arange(count, dtype="int64"), y=y)
        paths.append(path)
    return paths[0], paths[1]


def data_overrides(train: Path, validation: Path) -> list[str]:
    """The `kdist.train` overrides that read `write_data`'s files with the id feature."""
    return [
        "data=npz",
        f"data.source.path={train}",
        f"data.source.validation_path={validation}",
        "data.source.x_key=[x,id]",
        "data.source.num_classes=2",
    ]


@keras.saving.register_keras_serializable(package="elastic_models")
class CountingModel(keras.Model):
    """A small classifier of `inputs["x"]` that counts the ids it trains on, per epoch.

    Args:
        examples: training examples (ids are `0..examples-1`).
        epochs: epochs of the run (rows of `counts`).
        steps_per_epoch: optimizer steps per epoch.
    """

    def __init__(self, *, examples: int, epochs: int, steps_per_epoch: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.examples = examples
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(CLASSES)
        self.counts = self.add_weight(
            shape=(epochs, examples),
            initializer="zeros",
            trainable=False,
            # Every replica applies the same all-reduced update (below).
            aggregation="only_first_replica",
            name="counts",
        )

    def call(self, inputs: dict[str, Any]) -> Any:
        return self.out(self.hidden(inputs["x"]))

    def train_step(self, data: Any) -> dict[str, Any]:
        ids = tf.cast(tf.reshape(data[0]["id"], [-1]), "int32")
        epoch = tf.minimum(
            tf.cast(self.optimizer.iterations, "int32") // self.steps_per_epoch, self.epochs - 1
        )
        seen = tf.reduce_sum(tf.one_hot(ids, self.examples), axis=0)
        # The ids of the whole global batch, from every replica.
        seen = tf.distribute.get_replica_context().all_reduce("sum", seen)
        self.counts.assign_add(tf.one_hot(epoch, self.epochs)[:, None] * seen[None, :])
        return super().train_step(data)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "examples": self.examples,
            "epochs": self.epochs,
            "steps_per_epoch": self.steps_per_epoch,
        }


def counting_model(*, examples: int, epochs: int, steps_per_epoch: int) -> keras.Model:
    """`model._target_` for `CountingModel` (with `+model.examples=...` and so on)."""
    return CountingModel(examples=examples, epochs=epochs, steps_per_epoch=steps_per_epoch)


def _cluster() -> tuple[int | None, int]:
    """This task's worker index and the number of workers, from TF_CONFIG."""
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    return config.get("task", {}).get("index"), len(config.get("cluster", {}).get("worker", []))


class DieAsWorker:
    """`callbacks.extra` target: SIGKILL this process as worker `index` of `of`.

    It fires once `step` optimizer steps are done, whenever the process runs as worker
    `index` in a cluster of `of` workers (TF_CONFIG): a slot gone for good. In a cluster
    of another size it does nothing. With `times` and `record` (a file that counts the
    deaths) it stops firing after `times` deaths: the slot comes back healthy.
    """

    def __new__(cls, *, index: int, of: int, step: int, times: int | None = None, record: str = ""):
        class _Die(keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
                if _cluster() != (index, of):
                    return
                if int(self.model.optimizer.iterations.numpy()) < step:
                    return
                if times is not None:
                    deaths = Path(record).read_text() if Path(record).exists() else ""
                    if len(deaths) >= times:
                        return
                    Path(record).write_text(deaths + "x")
                os.kill(os.getpid(), signal.SIGKILL)

        return _Die()


class SlowWithWorkers:
    """`callbacks.extra` target: sleep `seconds` after each step in a cluster of `of` workers."""

    def __new__(cls, *, of: int, seconds: float):
        import time

        class _Slow(keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
                if _cluster()[1] == of:
                    time.sleep(seconds)

        return _Slow()
