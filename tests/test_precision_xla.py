"""Mixed precision and XLA under every strategy available in one process.

Cost: about 15 s fast (small MLP); the XLA-vs-plain comparison and the ResNet-20
done-when case are `slow` (about 10 s and 40 s on an idle machine).
"""

from __future__ import annotations

import math
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import SMALL_JOB, compose

import kdist


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _xla_compiled(runner) -> bool:
    """Whether the traced train function calls a function marked for XLA compilation."""
    concrete = runner._train_fn.get_concrete_function(
        runner._iterator, tf.constant(1), *runner._no_snapshot, runner._flags[0]
    )
    graph = concrete.graph.as_graph_def()
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    return any(node.attr["_XlaMustCompile"].b for node in nodes if "_XlaMustCompile" in node.attr)


def _run(tmp_path: Path, overrides: list[str]) -> kdist.Experiment:
    cfg = compose([*SMALL_JOB, f"run_dir={tmp_path}", *overrides])
    exp = kdist.Experiment(cfg)
    exp.fit()
    return exp


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_with_xla_trains(strategy: str, precision: str, tmp_path: Path):
    exp = _run(
        tmp_path,
        [
            f"strategy={strategy}",
            f"runtime.mixed_precision={precision}",
            "runtime.jit_compile=true",
        ],
    )
    compute = "float16" if precision == "mixed_float16" else "bfloat16"
    model, optimizer = exp.model, exp.optimizer
    assert model.get_layer("dense_0").compute_dtype == compute
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    assert model.get_layer("logits").compute_dtype == "float32"
    # float16 needs loss scaling; bfloat16 has float32's range and does not.
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) == (
        precision == "mixed_float16"
    )
    assert int(optimizer.iterations.numpy()) == 6
    metrics = exp.metrics()
    assert math.isfinite(metrics["train"]["loss"]) and math.isfinite(metrics["validation"]["loss"])
    assert exp.num_replicas == (2 if strategy == "mirrored" else 1)
    assert _xla_compiled(exp.runner)


def test_without_jit_nothing_is_marked_for_xla(tmp_path: Path):
    exp = _run(tmp_path, ["strategy=mirrored"])
    assert not _xla_compiled(exp.runner)


@pytest.mark.slow
def test_xla_and_plain_steps_agree_in_float32(tmp_path: Path):
    """XLA changes how the step runs, not what it computes."""
    weights = []
    for jit in ("false", "true"):
        exp = _run(
            tmp_path / jit,
            ["strategy=mirrored", f"runtime.jit_compile={jit}", "data.shuffle=false"],
        )
        weights.append(exp.model.get_layer("logits").get_weights()[0])
    np.testing.assert_allclose(weights[0], weights[1], atol=1e-4)


@pytest.mark.slow
def test_resnet20_bfloat16_xla_mirrored_trains(tmp_path: Path):
    """Done-when: model=resnet data=synthetic mixed_bfloat16 jit_compile mirrored x2."""
    cfg = compose(
        [
            "model=resnet",
            "data=synthetic",
            "data.source.input_shape=[32,32,3]",
            "data.source.num_train=128",
            "data.source.num_validation=32",
            "runtime.mixed_precision=mixed_bfloat16",
            "runtime.jit_compile=true",
            "strategy=mirrored",
            "trainer.epochs=1",
            "trainer.steps_per_epoch=4",
            "trainer.steps_per_execution=2",
            "trainer.global_batch_size=16",
            "trainer.verbose=0",
            "callbacks=minimal",
            f"run_dir={tmp_path}",
        ]
    )
    exp = kdist.Experiment(cfg)
    model = exp.build_model()
    assert model.name == "resnet20" and exp.num_replicas == 2
    before = [v.numpy().copy() for v in model.trainable_variables]
    exp.fit()
    assert int(exp.optimizer.iterations.numpy()) == 4
    assert math.isfinite(exp.metrics()["train"]["loss"])
    changed = [
        not np.allclose(b, v.numpy())
        for b, v in zip(before, model.trainable_variables, strict=True)
    ]
    assert all(changed)
    assert _xla_compiled(exp.runner)
