"""Gradient accumulation: `trainer.accumulate_steps=N` updates once per N micro-batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import compose

import kdist
from kdist.config import ConfigError

BASE = [
    "trainer.epochs=2",
    "trainer.steps_per_epoch=6",
    "trainer.global_batch_size=64",
    "trainer.steps_per_execution=2",
    "trainer.verbose=0",
    "callbacks=minimal",
    "optimizer=sgd",
    "optimizer.learning_rate=0.1",
]


def _train(run_dir: Path, extra: list[str]) -> kdist.Experiment:
    exp = kdist.Experiment(compose([*BASE, *extra]), run_dir=run_dir)
    exp.fit()
    return exp


def _max_diff(a: kdist.Experiment, b: kdist.Experiment) -> float:
    return max(
        float(np.max(np.abs(x - y)))
        for x, y in zip(a.model.get_weights(), b.model.get_weights(), strict=True)
    )


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
def test_four_micro_batches_of_16_equal_one_batch_of_64(strategy: str, tmp_path: Path):
    whole = _train(tmp_path / "whole", [f"strategy={strategy}"])
    micro = _train(tmp_path / "micro", [f"strategy={strategy}", "trainer.accumulate_steps=4"])
    assert micro.runner is not None and micro.runner.accumulate_steps == 4
    # Updates are counted, not micro-batches.
    assert int(micro.optimizer.iterations.numpy()) == 12
    moved = max(
        float(np.max(np.abs(x)))
        for x in (
            w1 - w0
            for w1, w0 in zip(
                micro.model.get_weights(),
                kdist.Experiment(
                    compose([*BASE, f"strategy={strategy}"]), run_dir=tmp_path / "fresh"
                )
                .build_model()
                .get_weights(),
                strict=True,
            )
        )
    )
    assert moved > 1e-3
    assert _max_diff(whole, micro) < 1e-5


def test_accumulating_run_resumes_step_exactly(tmp_path: Path):
    accumulate = ["trainer.accumulate_steps=4", "callbacks.backup.enabled=true"]
    backup = ["callbacks.backup.every_n_steps=3", "trainer.steps_per_execution=1"]
    run_dir = tmp_path / "run"
    stopped = kdist.Experiment(
        compose(
            [
                *BASE,
                *accumulate,
                *backup,
                "callbacks.extra=[{_target_: helpers.StopAtStep, step: 7}]",
            ]
        ),
        run_dir=run_dir,
    )
    stopped.fit()
    assert int(stopped.optimizer.iterations.numpy()) == 7
    resumed = _train(run_dir, [*accumulate, *backup])
    assert int(resumed.optimizer.iterations.numpy()) == 12
    reference = _train(tmp_path / "reference", [*accumulate, *backup])
    assert _max_diff(resumed, reference) < 1e-6


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.accumulate_steps=0", r"trainer\.accumulate_steps=0: must be a positive"),
        ("trainer.accumulate_steps=3", r"trainer\.accumulate_steps=3: does not split"),
    ],
)
def test_bad_accumulation_is_a_config_error(override: str, message: str, tmp_path: Path):
    with pytest.raises(ConfigError, match=message):
        kdist.Experiment(compose([*BASE, override]), run_dir=tmp_path)


def test_a_model_with_its_own_train_step_cannot_accumulate(tmp_path: Path):
    exp = kdist.Experiment(
        compose(
            [
                *BASE,
                "trainer.accumulate_steps=2",
                "model=custom",
                "model._target_=kdist.models.examples.clipped_classifier",
            ]
        ),
        run_dir=tmp_path,
    )
    with pytest.raises(ConfigError, match=r"accumulate_steps=1"):
        exp.build_model()
