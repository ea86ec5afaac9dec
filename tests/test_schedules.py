"""Learning-rate scaling with the replica count, warm-up and cosine schedules.

Cost: about 5 s.
"""

from __future__ import annotations

import math
from pathlib import Path

import keras
import numpy as np
import pytest
from helpers import compose

import kdist
from kdist.config.errors import ConfigError
from kdist.config.validate import validate
from kdist.modeling.optimizers import scaled_learning_rate
from kdist.modeling.schedules import WarmUp, build_schedule


def _rate(optimizer: keras.optimizers.Optimizer, step: int) -> float:
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = inner._learning_rate
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(step))
    return float(inner.learning_rate.numpy())


@pytest.mark.parametrize(
    ("rule", "replicas", "expected"),
    [("none", 4, 0.1), ("linear", 4, 0.4), ("sqrt", 4, 0.2), ("linear", 1, 0.1)],
)
def test_scaled_learning_rate(rule: str, replicas: int, expected: float):
    assert scaled_learning_rate(0.1, rule, replicas) == pytest.approx(expected)


def test_lr_scaling_with_the_replicas_of_the_strategy(tmp_path: Path):
    for strategy, rule, expected in [
        ("mirrored", "linear", 2e-3),
        ("mirrored", "sqrt", math.sqrt(2) * 1e-3),
        ("one_device", "linear", 1e-3),
    ]:
        cfg = compose(
            [
                f"strategy={strategy}",
                f"optimizer.lr_scaling={rule}",
                "optimizer.learning_rate=1e-3",
                f"run_dir={tmp_path}",
            ]
        )
        exp = kdist.Experiment(cfg)
        exp.build_model()
        assert _rate(exp.optimizer, 0) == pytest.approx(expected, rel=1e-6), (strategy, rule)


def test_warmup_then_constant():
    schedule = build_schedule(0.5, warmup_steps=4)
    assert isinstance(schedule, WarmUp)
    rates = [float(schedule(step)) for step in range(7)]
    np.testing.assert_allclose(rates, [0.125, 0.25, 0.375, 0.5, 0.5, 0.5, 0.5], rtol=1e-6)
    assert build_schedule(0.5) == 0.5
    # Serializable, so model.keras saves with the optimizer.
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, WarmUp) and restored.warmup_steps == 4


def test_cosine_with_warmup_reaches_peak_then_alpha():
    schedule = build_schedule(1.0, schedule="cosine", warmup_steps=10, alpha=0.1, total_steps=110)
    assert float(schedule(0)) == pytest.approx(0.0)
    assert float(schedule(5)) == pytest.approx(0.5)
    assert float(schedule(10)) == pytest.approx(1.0)
    assert float(schedule(60)) == pytest.approx(0.55, rel=1e-5)  # half-way: (1 + 0.1) / 2
    assert float(schedule(110)) == pytest.approx(0.1, rel=1e-5)
    plain = build_schedule(1.0, schedule="cosine", decay_steps=4)
    np.testing.assert_allclose(
        [float(plain(s)) for s in range(5)], [1.0, 0.853553, 0.5, 0.146447, 0.0], atol=1e-5
    )


def test_decay_steps_come_from_the_run_length(tmp_path: Path):
    cfg = compose(
        [
            "optimizer=sgd",
            "optimizer.schedule=cosine",
            "optimizer.warmup_steps=3",
            "optimizer.lr_scaling=linear",
            "optimizer.learning_rate=0.05",
            "strategy=mirrored",
            "trainer.epochs=4",
            "trainer.steps_per_epoch=5",
            "trainer.verbose=0",
            "callbacks=minimal",
            f"run_dir={tmp_path}",
        ]
    )
    exp = kdist.Experiment(cfg)
    exp.build_model()
    schedule = exp.optimizer._learning_rate
    assert isinstance(schedule, keras.optimizers.schedules.CosineDecay)
    assert schedule.decay_steps == 4 * 5 - 3 and schedule.warmup_steps == 3
    assert schedule.warmup_target == pytest.approx(0.1)  # 0.05 x 2 replicas
    exp.fit()
    # After the whole run the rate has decayed to alpha (0) times the peak.
    assert float(exp.optimizer.learning_rate.numpy()) == pytest.approx(0.0, abs=1e-7)


def test_schedule_errors_name_the_key(tmp_path: Path):
    cfg = compose(["optimizer.schedule=linear", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"optimizer\.schedule='linear'.*null, cosine"):
        validate(cfg)
    cfg = compose(["optimizer.alpha=2.0", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"optimizer\.alpha=2\.0"):
        validate(cfg)
    cfg = compose(
        [
            "optimizer.schedule=cosine",
            "optimizer.warmup_steps=50",
            "trainer.epochs=2",
            "trainer.steps_per_epoch=10",
            f"run_dir={tmp_path}",
        ]
    )
    with pytest.raises(ConfigError, match=r"optimizer\.warmup_steps=50.*the run has 20 steps"):
        kdist.Experiment(cfg).build_model()
    with pytest.raises(ConfigError, match=r"optimizer\.decay_steps"):
        build_schedule(0.1, schedule="cosine")
