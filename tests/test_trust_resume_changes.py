"""A change `trainer.allow_resume_changes=true` accepts is the change the resumed run trains with.

For each optimizer key a resume may change, a run trained one epoch is resumed with the
new value (allowed), and compared with a run that *started* from the same checkpoint with
that value: a copy of the folder whose saved config already holds it (no change to
allow), the learning rate variable set to its configured value when training begins
(a checkpoint holds the rate; nothing else of the config). After the first resumed step
the optimizer holds the new value, and after the epoch the weights equal the reference's,
and differ from a resume that kept the old value (so the comparison can fail). A key
whose checkpointed state would swallow the change is refused in one line instead
(`kdist.runs.resume_check`). The command line's case (issue 43, a regression of 5aa1fa7:
the learning rate was logged as changed and the checkpoint's restored over it) runs
`python -m kdist.train` twice; it is slow (`tests/slow_cases.txt`).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
from helpers import LOGICAL, compose, run_module

import kdist
from kdist.config import ConfigError, schema
from kdist.modeling import optimizers
from kdist.runs import resume_check

TINY = ["trainer=fast_dev", "trainer.epochs=1", "trainer.verbose=0", "trainer.validation=false"]
ALLOW = "trainer.allow_resume_changes=true"

COSINE = ["optimizer.schedule=cosine", "optimizer.decay_steps=20"]
# (the run's optimizer overrides, the changed key, its new value). Every key of every
# optimizer's schema is here, in REFUSED, or in NOT_A_VALUE (checked below).
CHANGES = [
    (["optimizer=adam"], "learning_rate", 0.05),
    (["optimizer=adam"], "beta_1", 0.5),
    (["optimizer=adam"], "beta_2", 0.9),
    (["optimizer=adam"], "epsilon", 0.5),
    (["optimizer=adam"], "clipnorm", 1e-3),
    (["optimizer=adam", "strategy=mirrored"], "lr_scaling", "linear"),  # the rate doubles
    (["optimizer=adam", *COSINE], "alpha", 0.9),
    (["optimizer=adam", *COSINE], "decay_steps", 6),
    (["optimizer=adam", *COSINE], "warmup_steps", 8),
    (["optimizer=adam"], "sparse_updates", True),
    (["optimizer=adamw"], "weight_decay", 0.5),
    (["optimizer=sgd"], "learning_rate", 0.5),
    (["optimizer=sgd"], "momentum", 0.5),
    (["optimizer=sgd"], "nesterov", True),
    (["optimizer=adagrad"], "learning_rate", 0.3),
    (["optimizer=adagrad"], "epsilon", 0.5),
]
# The checkpoint holds the state these keys decide: a change would not apply (one line).
REFUSED = {
    "_target_": "optimizer=sgd",
    "schedule": "optimizer.schedule=cosine",
    "initial_accumulator_value": "optimizer.initial_accumulator_value=0.5",
}
NOT_A_VALUE = {"_partial_"}  # Hydra's, not the optimizer's
# Applied (the optimizer's class says so) but trained alike by this dense model.
SAME_TRAINING = {"sparse_updates": "LazyAdam"}
# The fast suite runs these; the rest run in the slow one (`tests/slow_cases.txt`).
FAST = {("optimizer=adam", "learning_rate")}


def _case_id(case: tuple[list[str], str, Any]) -> str:
    base, key, _ = case
    return f"{base[0].split('=')[1]}-{key}"


def _hyperparameters(optimizer: Any) -> dict[str, Any]:
    """What the optimizer trains with now: its rate (a schedule's, at this step) and its
    constructor's values."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    values = {"learning_rate": float(keras.ops.convert_to_numpy(inner.learning_rate))}
    for name in ("beta_1", "beta_2", "epsilon", "clipnorm", "weight_decay", "momentum"):
        if getattr(inner, name, None) is not None:
            values[name] = float(getattr(inner, name))
    values["nesterov"] = float(bool(getattr(inner, "nesterov", False)))
    values["class"] = type(inner).__name__
    return values


class _FirstStep(keras.callbacks.Callback):
    """Records the optimizer's values after the first resumed step; sets the learning rate
    variable to `rate` when training begins (the reference run's start)."""

    def __init__(self, rate: float | None = None) -> None:
        super().__init__()
        self.rate = rate
        self.values: dict[str, Any] | None = None

    def on_train_begin(self, logs=None):
        if self.rate is not None:
            optimizer = self.model.optimizer
            inner = getattr(optimizer, "inner_optimizer", optimizer)
            inner._learning_rate.assign(self.rate)

    def on_train_batch_end(self, batch, logs=None):
        if self.values is None:
            self.values = _hyperparameters(self.model.optimizer)


def _resume(folder: Path, overrides: list[str], *, reference: bool = False) -> tuple[Any, Any]:
    """Resume `folder` one epoch more; as the reference run, the learning rate variable
    set at the start to what an optimizer built from `overrides` starts with."""
    exp = kdist.Experiment(compose([*TINY, *overrides]), run_dir=folder)
    rate = None
    if reference:
        # (`total_steps` only sizes a cosine schedule, which no checkpoint holds.)
        built = optimizers.build(exp.cfg.optimizer, num_replicas=exp.num_replicas, total_steps=1)
        variable = getattr(built, "_learning_rate", None)
        if isinstance(variable, keras.Variable):  # not a schedule: the checkpoint holds it
            rate = float(variable.numpy())
    seen = _FirstStep(rate)
    exp.fit(epochs=2, callbacks=[seen])
    return exp, seen.values


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Any:
    """One folder per base config, trained one epoch; and its plain resume's weights."""
    folders: dict[str, tuple[Path, list[np.ndarray]]] = {}

    def get(base: list[str]) -> tuple[Path, list[np.ndarray]]:
        name = "_".join(b.replace("=", "-").replace(".", "-") for b in base)
        if name not in folders:
            folder = tmp_path_factory.mktemp(name) / "run"
            kdist.Experiment(compose([*TINY, *base]), run_dir=folder).fit()
            kept = folder.parent / "kept"
            shutil.copytree(folder, kept)
            plain, _ = _resume(kept, base)
            folders[name] = (folder, plain.model.get_weights())
        return folders[name]

    return get


def _check_change(trained: Any, tmp_path: Path, base: list[str], key: str, value: Any) -> None:
    folder, unchanged = trained(base)
    new = [*base, f"optimizer.{key}={value}"]
    changed, reference = tmp_path / "changed", tmp_path / "reference"
    shutil.copytree(folder, changed)
    shutil.copytree(folder, reference)
    # The reference starts with the new value: its saved config holds it already.
    resume_check.save_config(reference, compose([*TINY, *new]))
    expected, expected_values = _resume(reference, new, reference=True)
    got, values = _resume(changed, [*new, ALLOW])

    assert values == expected_values, (values, expected_values)
    if key in values:
        assert values[key] == pytest.approx(float(value)), values
    assert got.model.optimizer.iterations.numpy() == expected.model.optimizer.iterations.numpy()
    for mine, theirs in zip(got.model.get_weights(), expected.model.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    if key in SAME_TRAINING:
        assert values["class"] == SAME_TRAINING[key], values
        return
    # The change changes the training: the test could fail.
    assert any(
        not np.array_equal(a, b) for a, b in zip(got.model.get_weights(), unchanged, strict=True)
    ), f"optimizer.{key}={value} trains as the old value: pick a value that shows"


@pytest.mark.parametrize("case", [c for c in CHANGES if (c[0][0], c[1]) in FAST], ids=_case_id)
def test_an_allowed_optimizer_change_is_trained_with(trained, tmp_path, case):
    _check_change(trained, tmp_path, *case)


@pytest.mark.parametrize("case", [c for c in CHANGES if (c[0][0], c[1]) not in FAST], ids=_case_id)
def test_every_allowed_optimizer_change_is_trained_with(trained, tmp_path, case):
    _check_change(trained, tmp_path, *case)


def test_the_table_covers_every_optimizer_key():
    """A key added to an optimizer's schema must say what a resume does with it."""
    keys: set[str] = set()
    for config in (schema.AdamConfig, schema.AdamWConfig, schema.AdagradConfig, schema.SGDConfig):
        keys |= {field.name for field in dataclasses.fields(config)}
    covered = {key for _, key, _ in CHANGES} | set(REFUSED) | NOT_A_VALUE
    assert keys <= covered, sorted(keys - covered)


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_change_the_checkpoint_would_swallow_is_one_line(trained, tmp_path, key):
    base = ["optimizer=adagrad"] if key == "initial_accumulator_value" else ["optimizer=adam"]
    folder, _ = trained(base)
    run_dir = tmp_path / "run"
    shutil.copytree(folder, run_dir)
    exp = kdist.Experiment(compose([*TINY, *base, REFUSED[key], ALLOW]), run_dir=run_dir)
    with pytest.raises(ConfigError, match=r"cannot change on resume") as error:
        exp.fit(epochs=2)
    assert "\n" not in str(error.value)
    assert str(error.value.key).startswith("optimizer.")


def test_the_command_line_resumes_with_the_changed_learning_rate(tmp_path: Path):
    """Issue 43: `kdist.train trainer.epochs=1`, then `trainer.epochs=2
    optimizer.learning_rate=0.5 trainer.allow_resume_changes=true` on the same folder. The
    reference is the same command on a copy of the folder, with a callback that sets the
    rate to 0.5 when training begins (a run that started from that checkpoint at 0.5)."""
    args = ["hydra.run.dir=run", LOGICAL, *TINY]
    first = run_module("kdist.train", args, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    (tmp_path / "reference").mkdir()
    shutil.copytree(tmp_path / "run", tmp_path / "reference" / "run")
    again = [*args, "trainer.epochs=2", "optimizer.learning_rate=0.5", ALLOW]
    changed = run_module("kdist.train", again, cwd=tmp_path, timeout=300)
    assert changed.returncode == 0, changed.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resuming with optimizer.learning_rate 0.5 as configured" in log
    saved = keras.models.load_model(tmp_path / "run" / "model.keras")
    assert float(saved.optimizer.learning_rate.numpy()) == pytest.approx(0.5)

    starts_at = f"callbacks.extra=[{{_target_: {__name__}._FirstStep, rate: 0.5}}]"
    reference = run_module(
        "kdist.train",
        [*again, starts_at],
        cwd=tmp_path / "reference",
        timeout=300,
        env={"PYTHONPATH": str(Path(__file__).parent)},
    )
    assert reference.returncode == 0, reference.stderr
    expected = keras.models.load_model(tmp_path / "reference" / "run" / "model.keras")
    for mine, theirs in zip(saved.get_weights(), expected.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
