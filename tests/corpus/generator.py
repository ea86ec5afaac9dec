"""A grammar of small Keras programs, drawn by Hypothesis, trained by `model.fit` and by kdist.

A `Program` is one choice per rule below; `build_model`, `make_fit_arguments` and
`run_keras`/`run_kdist` turn it into a runnable program (a tiny model, tiny data, so one
example trains in a few seconds). `test_generated.py` compares the two sides by the final
weights (or, where `shuffle=True` lets each side draw its own order, the loss per epoch)
and by the callback trace (`harness.compare_traces`). The grammar's choices and their
count are in README.md ("The program generator").

Rules (a rule's choices, then the constraints that keep a program one Keras accepts):

- model: `sequential`, `functional` (two named inputs), `multi_output` (two named
  outputs), `subclassed` (unbuilt until `fit`), `own_train_step` (a functional model whose
  `train_step` is the keras.io guide's)
- loss: `string`, `object`, `function`; a multi-output model's losses as a `list` or a
  `dict`, with or without `loss_weights`
- metrics: `none`, `string`, `object` (a multi-output model: one list for all outputs, or
  a dict per output)
- compile: `jit_compile` False/True, `steps_per_execution` 1/3
- optimizer: Adam or SGD; a learning-rate schedule or a number; `clipnorm`; `use_ema`;
  `gradient_accumulation_steps` 1/2
- data: `arrays`, `dict` (named inputs; models with named inputs only), `dataset`,
  `py_dataset`, `generator` (an endless one, with `steps_per_epoch`); a partial last batch
  or not; `batch_size` 8, 16 or left out for arrays (Keras's 32)
- validation: none, `validation_split` (arrays only), `validation_data`;
  `validation_freq` 1/2
- fit: `epochs` 1-3, `initial_epoch` 0/1 (below `epochs`), `class_weight` (one output),
  `sample_weight`, `shuffle` (arrays only; True draws each side's own order)
- callbacks: the recorder always; `EarlyStopping`, `ReduceLROnPlateau` each or not
- a second `fit`: none, after a recompile (SGD(0.01)), after `trainable = False` on the
  first layer without a recompile
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
from hypothesis import strategies as st

FEATURES, CLASSES = 6, 3
MODELS = ("sequential", "functional", "multi_output", "subclassed", "own_train_step")
NAMED_INPUTS = ("functional", "multi_output")
DATA = ("arrays", "dict", "dataset", "py_dataset", "generator")
SECOND_FITS = ("none", "recompile", "trainable")


@dataclass(frozen=True)
class Program:
    """One drawn program: every rule's choice (see the module docstring)."""

    model: str = "sequential"
    loss: str = "string"
    loss_container: str = "list"  # multi_output only
    loss_weights: bool = False  # multi_output only
    metrics: str = "none"
    metrics_per_output: bool = False  # multi_output only
    jit_compile: bool = False
    steps_per_execution: int = 1
    optimizer: str = "adam"
    schedule: bool = False
    clipnorm: bool = False
    use_ema: bool = False
    gradient_accumulation_steps: int = 1
    data: str = "arrays"
    examples: int = 48
    batch_size: int | None = 16
    validation: str = "none"
    validation_freq: int = 1
    epochs: int = 2
    initial_epoch: int = 0
    class_weight: bool = False
    sample_weight: bool = False
    shuffle: bool = False
    early_stopping: bool = False
    reduce_lr: bool = False
    second_fit: str = "none"

    def describe(self) -> str:
        default = Program()
        changed = {k: v for k, v in asdict(self).items() if getattr(default, k) != v}
        return "Program(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ")"


@st.composite
def programs(draw: st.DrawFn) -> Program:
    """The Hypothesis strategy: one `Program`, every constraint of the grammar kept."""
    model = draw(st.sampled_from(MODELS))
    multi = model == "multi_output"
    data = draw(st.sampled_from(DATA if model in NAMED_INPUTS else DATA[:1] + DATA[2:]))
    arrays = data in ("arrays", "dict")
    epochs = draw(st.integers(1, 3))
    use_ema = draw(st.booleans())
    schedule = draw(st.booleans())
    batch_size = draw(st.sampled_from((8, 16, None) if arrays else (8, 16)))
    # Keras refuses class_weight with a multi-output model, a generator, or a sample_weight.
    class_weight = draw(st.booleans()) if not multi and data != "generator" else False
    # `validation_split` takes arrays only (Keras refuses it with other data).
    validation = draw(st.sampled_from(("none", "split", "data") if arrays else ("none", "data")))
    return Program(
        model=model,
        loss=draw(st.sampled_from(("string", "object", "function"))),
        loss_container=draw(st.sampled_from(("list", "dict"))) if multi else "list",
        loss_weights=draw(st.booleans()) if multi else False,
        metrics=draw(st.sampled_from(("none", "string", "object"))),
        metrics_per_output=draw(st.booleans()) if multi else False,
        # XLA compiles cost seconds a program: 1 draw in 4 (the space counts both).
        jit_compile=draw(st.sampled_from((False, False, False, True))),
        steps_per_execution=draw(st.sampled_from((1, 3))),
        optimizer=draw(st.sampled_from(("adam", "sgd"))),
        schedule=schedule,
        clipnorm=draw(st.booleans()),
        use_ema=use_ema,
        gradient_accumulation_steps=draw(st.sampled_from((1, 2))),
        data=data,
        examples=draw(st.sampled_from((48, 53))),  # 53: a partial last batch
        batch_size=batch_size,
        validation=validation,
        validation_freq=draw(st.sampled_from((1, 2))) if validation != "none" else 1,
        epochs=epochs,
        initial_epoch=draw(st.integers(0, min(1, epochs - 1))),
        class_weight=class_weight,
        sample_weight=draw(st.booleans()) if not class_weight else False,
        shuffle=draw(st.booleans()) if arrays else False,
        early_stopping=draw(st.booleans()),
        # ReduceLROnPlateau cannot set the rate of a schedule (Keras raises).
        reduce_lr=draw(st.booleans()) if not schedule else False,
        # Keras's own fit cannot finalize EMA weights after a trainable change (its moving
        # averages are matched to the new, shorter trainable list: a shape error).
        second_fit=draw(st.sampled_from(second_fits(model, use_ema))),
    )


def second_fits(model: str, use_ema: bool) -> tuple[str, ...]:
    """The second fits drawn for `model` (with or without EMA)."""
    del model  # every model draws every second fit
    if use_ema:
        return ("none", "recompile")
    return SECOND_FITS


def space_size() -> int:
    """How many programs the grammar holds (README.md states it; a test recounts it)."""
    total = 0
    for model in MODELS:
        multi = model == "multi_output"
        for data in DATA if model in NAMED_INPUTS else DATA[:1] + DATA[2:]:
            arrays = data in ("arrays", "dict")
            per_data = (
                3  # loss
                * (2 * 2 if multi else 1)  # loss container, loss_weights
                * 3  # metrics
                * (2 if multi else 1)  # metrics per output
                * 2  # jit_compile
                * 2  # steps_per_execution
                * 2  # optimizer
                * 3  # (schedule, ReduceLROnPlateau): F/F, F/T, T/F
                * 2  # clipnorm
                * 2  # gradient_accumulation_steps
                * 2  # examples (a partial batch or not)
                * (3 if arrays else 2)  # batch_size
                * (1 + 2 * 2 if arrays else 1 + 2)  # none, or (split/)data x freq 1/2
                * (1 + 2 + 2)  # (epochs, initial_epoch): (1,0) (2,0) (2,1) (3,0) (3,1)
                # (class_weight, sample_weight): F/F, F/T and, where allowed, T/F
                * (3 if not multi and data != "generator" else 2)
                * (2 if arrays else 1)  # shuffle
                * 2  # EarlyStopping
                # (use_ema, second fit): no EMA x 3 (2 for its own train_step), EMA x 2
                * (len(second_fits(model, False)) + len(second_fits(model, True)))
            )
            total += per_data
    return total


# --- the program's code -------------------------------------------------------------------


def _loss(program: Program) -> Any:
    if program.loss == "string":
        return "sparse_categorical_crossentropy"
    if program.loss == "object":
        return keras.losses.SparseCategoricalCrossentropy()
    return keras.losses.sparse_categorical_crossentropy


def _metrics(program: Program) -> Any:
    if program.metrics == "none":
        return None
    made = (
        ["accuracy"] if program.metrics == "string" else [keras.metrics.SparseCategoricalAccuracy()]
    )
    if program.model != "multi_output":
        return made
    other = (
        ["accuracy"] if program.metrics == "string" else [keras.metrics.SparseCategoricalAccuracy()]
    )
    # Keras 3 takes a multi-output model's metrics per output: a dict, or a list of lists.
    return {"first": made, "second": other} if program.metrics_per_output else [made, other]


def _optimizer(program: Program, learning_rate: float | None = None) -> keras.optimizers.Optimizer:
    rate: Any = learning_rate or (0.02 if program.optimizer == "adam" else 0.1)
    if program.schedule and learning_rate is None:
        rate = keras.optimizers.schedules.ExponentialDecay(rate, decay_steps=3, decay_rate=0.8)
    kwargs: dict[str, Any] = {}
    if program.clipnorm:
        kwargs["clipnorm"] = 0.5
    if program.use_ema:
        kwargs.update(use_ema=True, ema_momentum=0.8)
    if program.gradient_accumulation_steps > 1:
        kwargs["gradient_accumulation_steps"] = program.gradient_accumulation_steps
    cls = keras.optimizers.Adam if program.optimizer == "adam" else keras.optimizers.SGD
    return cls(learning_rate=rate, **kwargs)


def compile_model(model: keras.Model, program: Program, learning_rate: float | None = None) -> None:
    loss: Any = _loss(program)
    loss_weights: Any = None
    if program.model == "multi_output":
        second = _loss(program)
        loss = (
            {"first": loss, "second": second}
            if program.loss_container == "dict"
            else [loss, second]
        )
        if program.loss_weights:
            weights = (1.0, 0.5)
            loss_weights = (
                dict(zip(("first", "second"), weights, strict=True))
                if program.loss_container == "dict"
                else list(weights)
            )
    model.compile(
        optimizer=_optimizer(program, learning_rate)
        if learning_rate is None
        else keras.optimizers.SGD(learning_rate),
        loss=loss,
        loss_weights=loss_weights,
        metrics=_metrics(program),
        jit_compile=program.jit_compile,
        steps_per_execution=program.steps_per_execution,
    )


class SubclassedModel(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(CLASSES, activation="softmax")

    def call(self, inputs):
        return self.out(self.hidden(inputs))


class OwnTrainStepModel(keras.Model):
    """keras.io's "customizing what happens in fit" guide's `train_step`."""

    def train_step(self, data):
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred, sample_weight=sample_weight)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)
        return {m.name: m.result() for m in self.metrics}


def build_model(program: Program) -> keras.Model:
    """The drawn model, seeded and compiled (call it inside the side's strategy scope)."""
    keras.utils.set_random_seed(1)
    if program.model == "sequential":
        model: keras.Model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(CLASSES, activation="softmax"),
            ]
        )
    elif program.model == "subclassed":
        model = SubclassedModel()
    elif program.model == "own_train_step":
        inputs = keras.Input((FEATURES,))
        hidden = keras.layers.Dense(8, activation="relu")(inputs)
        model = OwnTrainStepModel(inputs, keras.layers.Dense(CLASSES, activation="softmax")(hidden))
    else:
        a = keras.Input((FEATURES,), name="a")
        b = keras.Input((2,), name="b")
        hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([a, b]))
        first = keras.layers.Dense(CLASSES, activation="softmax", name="first")(hidden)
        if program.model == "functional":
            model = keras.Model({"a": a, "b": b}, first)
        else:
            second = keras.layers.Dense(CLASSES, activation="softmax", name="second")(hidden)
            model = keras.Model({"a": a, "b": b}, {"first": first, "second": second})
    compile_model(model, program)
    return model


class _Batches(keras.utils.PyDataset):
    def __init__(self, parts: tuple, batch_size: int) -> None:
        super().__init__()
        self.parts, self.batch_size = parts, batch_size

    def __len__(self) -> int:
        return math.ceil(len(_first(self.parts[1])) / self.batch_size)

    def __getitem__(self, index: int) -> tuple:
        cut = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return tuple(keras.tree.map_structure(lambda v: v[cut], p) for p in self.parts)


def _first(value: Any) -> np.ndarray:
    return keras.tree.flatten(value)[0]


def _examples(program: Program, n: int, seed: int) -> tuple[Any, Any, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = ((x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5)).astype("int64")
    weights = rng.uniform(0.5, 2.0, size=n).astype("float32")
    inputs: Any = x
    if program.model in NAMED_INPUTS:
        inputs = {"a": x, "b": rng.normal(size=(n, 2)).astype("float32")}
    targets: Any = y
    if program.model == "multi_output":
        targets = {"first": y, "second": (x[:, 2] > 0).astype("int64")}
    return inputs, targets, weights


def make_fit_arguments(program: Program) -> dict[str, Any]:
    """`fit`'s arguments for one side (made anew: a dataset or generator is read once)."""
    import tensorflow as tf

    x, y, weights = _examples(program, program.examples, 0)
    batch = program.batch_size or 32
    parts = (x, y, weights) if program.sample_weight else (x, y)
    kwargs: dict[str, Any] = {"epochs": program.epochs, "initial_epoch": program.initial_epoch}
    if program.data in ("arrays", "dict"):
        kwargs.update(x=x, y=y, shuffle=program.shuffle)
        if program.batch_size is not None:
            kwargs["batch_size"] = program.batch_size
        if program.sample_weight:
            kwargs["sample_weight"] = weights
    elif program.data == "dataset":
        kwargs["x"] = tf.data.Dataset.from_tensor_slices(parts).batch(batch)
    elif program.data == "py_dataset":
        kwargs.update(x=_Batches(parts, batch), shuffle=False)
    else:
        steps = math.ceil(program.examples / batch)

        def batches():
            while True:
                for i in range(steps):
                    cut = slice(i * batch, (i + 1) * batch)
                    yield tuple(keras.tree.map_structure(lambda v, c=cut: v[c], p) for p in parts)

        kwargs.update(x=batches(), steps_per_epoch=steps)
    if program.validation == "split":
        kwargs["validation_split"] = 0.25
    elif program.validation == "data":
        xv, yv, _ = _examples(program, 20, 1)
        kwargs["validation_data"] = (xv, yv)
    if program.validation != "none":
        kwargs["validation_freq"] = program.validation_freq
    if program.class_weight:
        kwargs["class_weight"] = {0: 1.0, 1: 2.0, 2: 0.5}
    callbacks: list[keras.callbacks.Callback] = []
    monitor = "val_loss" if program.validation != "none" else "loss"
    if program.early_stopping:
        callbacks.append(keras.callbacks.EarlyStopping(monitor=monitor, patience=0, min_delta=0.05))
    if program.reduce_lr:
        callbacks.append(
            keras.callbacks.ReduceLROnPlateau(monitor=monitor, patience=0, min_delta=0.05)
        )
    kwargs["callbacks"] = callbacks
    return kwargs


def _second_fit_change(model: keras.Model, program: Program) -> None:
    if program.second_fit == "recompile":
        compile_model(model, program, learning_rate=0.01)
    elif program.second_fit == "trainable":
        next(layer for layer in model.layers if layer.weights).trainable = False


def run_keras(program: Program) -> tuple[keras.Model, dict, list]:
    """`model.fit` on one device, as the drawn program's author runs it."""
    from harness import TraceRecorder

    recorder = TraceRecorder()
    model = build_model(program)
    kwargs = make_fit_arguments(program)
    kwargs["callbacks"].append(recorder)
    history = model.fit(verbose=0, **kwargs)
    if program.second_fit != "none":
        _second_fit_change(model, program)
        again = make_fit_arguments(program)
        again["callbacks"] = [recorder]
        history = model.fit(verbose=0, **again)
    return model, dict(history.history), recorder.calls


def run_kdist(program: Program, run_dir: Path) -> tuple[keras.Model, dict, list]:
    """kdist's notebook API, one device: `kdist.fit`, then `Experiment.fit` for a second fit."""
    from harness import BASE, TraceRecorder

    import kdist

    recorder = TraceRecorder()
    kwargs = make_fit_arguments(program)
    kwargs["callbacks"].append(recorder)
    history = kdist.fit(
        lambda: build_model(program),
        strategy="one_device",
        overrides=BASE,
        run_dir=run_dir,
        verbose=0,
        **kwargs,
    )
    exp = history.experiment
    if program.second_fit != "none":
        with exp.strategy.scope():
            _second_fit_change(exp.model, program)
        again = make_fit_arguments(program)
        again["callbacks"] = [recorder]
        history = exp.fit(verbose=0, **again)
    return exp.model, dict(history.history), recorder.calls
