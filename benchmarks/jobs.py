"""The same training job three ways: the kdist engine, a hand-written loop, Keras `fit`.

Every side trains the same model (built by `kdist.models.build`, so the layers are
identical), with Adam at 1e-3, sparse categorical cross-entropy on logits and an
accuracy metric, on the same arrays shuffled with the same seed, under the same
strategy. One call of `fit(epochs, steps_per_epoch)` is one benchmark round.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

__all__ = [
    "HandWrittenLoop",
    "Job",
    "KdistJob",
    "KerasFit",
    "input_pipeline",
    "kdist_overrides",
    "kdist_pipeline",
    "synthetic_data",
]

# The process splits its CPU into this many logical devices (mirrored with 2 replicas).
LOGICAL_DEVICES = 2


class Job:
    """A spec shared by the three sides: model, batch, steps per call, data size."""

    def __init__(
        self,
        *,
        model: str,
        global_batch_size: int,
        steps_per_execution: int,
        epochs: int,
        steps_per_epoch: int,
        num_train: int = 4096,
        input_shape: Sequence[int] = (28, 28, 1),
        shuffle_buffer: int = 4096,
        seed: int = 42,
    ):
        self.model = model
        self.global_batch_size = global_batch_size
        self.steps_per_execution = steps_per_execution
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.num_train = num_train
        self.input_shape = tuple(input_shape)
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed

    @property
    def steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The training arrays (kdist's synthetic source, data seed 0)."""
        from kdist.data.builtin import synthetic

        source = synthetic(num_train=self.num_train, num_validation=0, input_shape=self.input_shape)
        return source.arrays("train")

    def build_model(self) -> keras.Model:
        import kdist

        return kdist.models.build(self.model, input_shape=self.input_shape, num_classes=10)


def synthetic_data(job: Job) -> list[str]:
    """The `data` overrides for kdist's synthetic source with the job's arrays."""
    shape = ",".join(str(d) for d in job.input_shape)
    return [
        "data=synthetic",
        f"data.source.num_train={job.num_train}",
        "data.source.num_validation=0",
        f"data.source.input_shape=[{shape}]",
    ]


def kdist_overrides(job: Job, *more: str, data: Sequence[str] | None = None) -> list[str]:
    """kdist overrides for `job`: no validation, minimal callbacks, silent.

    Args:
        job: the job.
        *more: overrides appended last (they win).
        data: the `data` overrides. Defaults to `None`: kdist's synthetic source with
            the job's arrays (the same as `Job.arrays`).
    """
    if data is None:
        data = synthetic_data(job)
    return [
        f"runtime.logical_devices={LOGICAL_DEVICES}",
        f"model={job.model}",
        *data,
        f"data.shuffle_buffer={job.shuffle_buffer}",
        f"trainer.global_batch_size={job.global_batch_size}",
        f"trainer.steps_per_execution={job.steps_per_execution}",
        f"trainer.epochs={job.epochs}",
        f"trainer.steps_per_epoch={job.steps_per_epoch}",
        "trainer.validation=false",
        "objective.name=loss",
        "objective.direction=min",
        "trainer.verbose=0",
        "callbacks=minimal",
        f"runtime.seed={job.seed}",
        *more,
    ]


def kdist_pipeline(job: Job, data: Sequence[str], batch: int) -> tuple[Any, tf.data.Dataset]:
    """kdist's training input pipeline for `job` with `data` overrides, on one device.

    Returns:
        The data source and the batched training dataset (batch `batch`, seed 42).
    """
    import kdist
    from kdist.config.targets import instantiate
    from kdist.data import make_dataset_fn

    cfg = kdist.compose(kdist_overrides(job, data=data))
    source = instantiate(cfg.data.source, _convert_="all")
    dataset_fn = make_dataset_fn(source, "train", cfg.data, global_batch_size=batch, seed=42)
    return source, dataset_fn(tf.distribute.InputContext())


class KdistJob:
    """`kdist.Experiment(...).fit()`: the kdist engine as a user runs it.

    Args:
        overrides: the config overrides (see `kdist_overrides`).
        run_dir: the run directory (metrics.json goes there).
    """

    def __init__(self, overrides: Sequence[str], run_dir: Path):
        import kdist

        self.cfg = kdist.compose(list(overrides))
        self.experiment = kdist.Experiment(self.cfg, run_dir=run_dir)
        self.experiment.build_model()
        # Per `fit`: the controller's epoch loop alone (`FitResult.train_seconds`: every
        # step call, hook, metric reset and epoch end, but not building the callbacks
        # before it or writing metrics.json after it).
        self.loop_seconds: list[float] = []

    @property
    def strategy(self) -> tf.distribute.Strategy:
        return self.experiment.strategy

    def fit(self) -> float:
        """Train `trainer.epochs` epochs; returns the wall seconds of `Experiment.fit`."""
        # `epochs=`: each call trains that many epochs more (a second `fit()` of a
        # finished Experiment trains nothing, as Keras's `fit` continues from the model).
        epochs = int(self.experiment.cfg.trainer.epochs)
        started = time.perf_counter()
        self.experiment.fit(epochs=epochs, verbose=0)
        wall = time.perf_counter() - started
        result = self.experiment.result
        assert result is not None
        self.loop_seconds.append(result.train_seconds)
        return wall

    def trace(self) -> None:
        """Trace the train function (one step), outside any timed round."""
        runner = self.experiment.runner
        assert runner is not None
        runner.train_steps(1)


def input_pipeline(job: Job, x: np.ndarray, y: np.ndarray) -> tf.data.Dataset:
    """What a user writes: cache, shuffle, repeat, batch (global), prefetch."""
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .cache()
        .shuffle(min(job.shuffle_buffer, len(x)), seed=job.seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(job.global_batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


class HandWrittenLoop:
    """The loop of TensorFlow's "Custom training with tf.distribute.Strategy" tutorial.

    `strategy.run(train_step)` inside a `tf.function` that runs `num_steps` steps per
    call (`tf.range`), a Keras model, optimizer, loss and metrics, the dataset
    distributed with `experimental_distribute_dataset`; the epoch's loss and accuracy
    are read at its end.

    Args:
        job: the job.
        strategy: the strategy (`tf.distribute.get_strategy()` for none).
    """

    def __init__(self, job: Job, strategy: tf.distribute.Strategy):
        self.job = job
        self.strategy = strategy
        x, y = job.arrays()
        with strategy.scope():
            model = job.build_model()
            optimizer = keras.optimizers.Adam(learning_rate=1e-3)
            # Keras 3 creates optimizer slots lazily; under a strategy they must exist
            # before tracing (the tutorial's Keras 2 optimizer did this by itself).
            optimizer.build(model.trainable_variables)
            loss_object = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=None
            )
            self.train_loss = keras.metrics.Mean(name="loss")
            self.train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.model = model
        dataset = strategy.experimental_distribute_dataset(input_pipeline(job, x, y))
        self.iterator = iter(dataset)
        train_loss, train_accuracy = self.train_loss, self.train_accuracy
        batch = job.global_batch_size

        def train_step(inputs: Any) -> None:
            features, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(features, training=True)
                per_example = loss_object(labels, logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            train_loss.update_state(per_example)
            train_accuracy.update_state(labels, logits)

        @tf.function
        def train_function(iterator: Any, num_steps: tf.Tensor) -> None:
            for _ in tf.range(num_steps):
                strategy.run(train_step, args=(next(iterator),))

        self.train_function = train_function

    def trace(self) -> None:
        """Trace the train function (one step), outside any timed round."""
        self.train_function(self.iterator, tf.constant(1, dtype=tf.int32))

    def fit(self) -> float:
        """Train `job.epochs` epochs; returns the wall seconds."""
        job = self.job
        started = time.perf_counter()
        for _ in range(job.epochs):
            self.train_loss.reset_state()
            self.train_accuracy.reset_state()
            done = 0
            while done < job.steps_per_epoch:
                count = min(job.steps_per_execution, job.steps_per_epoch - done)
                self.train_function(self.iterator, tf.constant(count, dtype=tf.int32))
                done += count
            self.logs = {
                "loss": float(self.train_loss.result()),
                "accuracy": float(self.train_accuracy.result()),
            }
        return time.perf_counter() - started


class KerasFit:
    """Keras 3 `model.fit` on the same job, compiled with `steps_per_execution`.

    Args:
        job: the job.
        strategy: the strategy the model is built under.
    """

    def __init__(self, job: Job, strategy: tf.distribute.Strategy):
        self.job = job
        x, y = job.arrays()
        with strategy.scope():
            self.model = job.build_model()
            self.model.compile(
                optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                steps_per_execution=job.steps_per_execution,
                # kdist's default (runtime.jit_compile=false); Keras turns XLA off under a
                # strategy anyway.
                jit_compile=False,
            )
        self.dataset = input_pipeline(job, x, y)

    def trace(self) -> None:
        """One untimed round: `fit` builds its train function on the first call."""
        self.fit()

    def fit(self) -> float:
        """Train `job.epochs` epochs; returns the wall seconds of `model.fit`."""
        job = self.job
        started = time.perf_counter()
        self.model.fit(
            self.dataset,
            epochs=job.epochs,
            steps_per_epoch=job.steps_per_epoch,
            shuffle=False,  # the dataset is shuffled already
            verbose=0,
        )
        return time.perf_counter() - started
