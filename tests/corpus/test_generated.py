"""Programs drawn from the grammar of `generator.py`, trained by `model.fit` and by kdist.

Each example is a tiny program (README.md, "The program generator"): kdist's notebook API on
one device (`kdist.fit`, then `Experiment.fit` for a second fit) must end with `fit`'s
weights within 1e-5 (with `shuffle=True` each side draws its own order: the loss per epoch
within 0.1 and the trace's epoch logs) and make the same callback trace. `make test` runs
a handful of examples (derandomized, so the same ones each time); the slow suite 200.
Every difference the generator found is kept below as an `@example` (or a corpus program).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import generator
import harness
import numpy as np
import pytest
from generator import Program
from hypothesis import HealthCheck, Phase, example, given, settings

SHUFFLED_LOSS_TOLERANCE = 0.1
COMMON = {
    # No shrinking: each example trains twice (seconds); the failure names the drawn
    # program's choices, which is what a reader needs to make it a corpus program.
    "phases": [Phase.explicit, Phase.reuse, Phase.generate],
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": False,
}


def check_program(program: Program) -> str:
    """Train `program` on both sides and assert kdist equals `fit`; returns what it measured."""
    with warnings.catch_warnings():
        # Keras's own notes about the drawn arguments (a generator's or dataset's `shuffle`,
        # `class_weight` with a dataset): the same on both sides.
        warnings.simplefilter("ignore", UserWarning)
        reference = generator.run_keras(program)
        with tempfile.TemporaryDirectory() as folder:
            ours = generator.run_kdist(program, Path(folder) / "run")
    model, history, trace = ours
    ref_model, ref_history, ref_trace = reference
    if program.shuffle:
        for key in ("loss",):
            a, b = np.asarray(history[key]), np.asarray(ref_history[key])
            assert a.shape == b.shape, f"{len(a)} epochs of {key}, fit's {len(b)}"
            diff = float(np.max(np.abs(a - b)))
            assert diff <= SHUFFLED_LOSS_TOLERANCE, f"{key} differs by {diff:.3g}"
        return harness.compare_traces(ref_trace, trace, SHUFFLED_LOSS_TOLERANCE, batch_values=False)
    diff = harness.max_weight_diff(model, ref_model)
    assert diff <= 1e-5, f"max abs weight diff {diff:.2e} > 1e-05"
    return harness.compare_traces(ref_trace, trace, 1e-4)


def _judge(program: Program) -> None:
    try:
        check_program(program)
    except Exception as error:
        raise AssertionError(f"{program.describe()}: {harness.one_line(error)}") from error


def test_the_space_is_counted():
    """README.md states the grammar's size: it is the count of `generator.space_size`."""
    text = (Path(__file__).parent / "README.md").read_text()
    assert f"{generator.space_size():,} programs" in text, generator.space_size()


@settings(max_examples=5, **COMMON)
@given(generator.programs())
# The differences the generator found on main (issue 42's run of 60 examples) that no corpus
# program holds; the others are corpus programs (ema_optimizer, initial_epoch,
# validation_freq, compile_steps_per_execution, fine_tuning_two_phase,
# trainable_change_without_recompile).
# `batch_size` left out: Keras's 32, kdist's config 64 (weights 4.0e-02 apart).
@example(Program(batch_size=None))
# A second `fit` after `trainable = False` without a recompile (weights 1.2e-01 apart).
@example(Program(second_fit="trainable"))
# A second `exp.fit` given a new dict of the same arrays: kdist compared the dicts with
# `==` (fit_arguments.same_args) and raised NumPy's "truth value of an array is ambiguous".
@example(Program(model="functional", data="dict", second_fit="recompile"))
# A model with its own `train_step`, a layer frozen without a recompile, then a second
# `fit` on new data: Keras's cached `train_function` keeps training the variables it was
# traced with; kdist traced the model's step again for the new data (weights 7.0e-02
# apart). Since: traced once per compile (`kdist.engine.step._traced_once_per_compile`).
@example(Program(model="own_train_step", second_fit="trainable"))
# Validation arrays beside a PyDataset: Keras validates them in batches of 32 (no
# `batch_size` can be given with such data); kdist used the training data's own 8.
@example(
    Program(
        model="own_train_step", loss="function", optimizer="sgd", clipnorm=True,
        gradient_accumulation_steps=2, data="py_dataset", batch_size=8, validation="data",
        validation_freq=2, class_weight=True, second_fit="trainable",
    )
)  # fmt: skip
# An endless generator with `steps_per_epoch=7` and `steps_per_execution=3`: Keras's epoch
# makes calls at steps 0, 3 and 6, each of 3 steps (9 batches); kdist cut the last call
# at the 7th (weights 3.2e-02 apart).
@example(Program(data="generator", examples=53, batch_size=8, steps_per_execution=3))
def test_generated_programs_equal_fit(program: Program):
    _judge(program)


@pytest.mark.parametrize("examples", [int(os.environ.get("KDIST_GENERATED_EXAMPLES", "200"))])
def test_many_generated_programs_equal_fit(examples: int):
    """The slow suite's run: `examples` programs (200 by default), seeded, all judged."""

    @settings(max_examples=examples, **COMMON)
    @given(generator.programs())
    def run(program: Program) -> None:
        _judge(program)

    run()
