"""The checkpoint's parts (`kdist.engine.checkpoint.parts`): declared in one place, none
attached to Keras's optimizer, and checkpoints written before that layout still restore."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import LOGICAL

import kdist
from kdist.engine.checkpoint.parts import AVERAGER, AVERAGER_BEFORE, RESIDUALS

OLD = Path(__file__).parent / "checkpoints_3407276"
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
# The jobs that wrote them (checkpoints_3407276/README.md), one epoch more.
JOB = [
    LOGICAL,
    "strategy=mirrored",
    "model.units=[8]",
    "trainer.epochs=2",
    "trainer.steps_per_epoch=6",
    "callbacks.backup.every_n_steps=3",
    "callbacks.checkpoint.enabled=false",
]
ARGS = {
    "local_sgd": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=4"],
    "diloco": ["strategy.sync.mode=diloco", "strategy.sync.sync_every=4"],
    "residuals": ["trainer.allreduce_dtype=bfloat16"],
}


def _old_run(tmp_path: Path, name: str) -> kdist.Experiment:
    shutil.copytree(OLD / name / "backup", tmp_path / name / "backup")
    return kdist.Experiment(kdist.compose([*JOB, *ARGS[name]]), run_dir=tmp_path / name)


def _saved(name: str, node: str) -> list[np.ndarray]:
    """The values a 3407276 checkpoint holds under `node/<i>`, in order."""
    reader = tf.train.load_checkpoint(str(OLD / name / "backup" / "ckpt-6"))
    found, i = [], 0
    while reader.has_tensor(f"{node}/{i}{VALUE}"):
        found.append(reader.get_tensor(f"{node}/{i}{VALUE}"))
        i += 1
    return found


@pytest.mark.parametrize("name", ["local_sgd", "diloco"])
def test_an_averager_saved_under_the_optimizer_by_3407276_restores_whole(tmp_path, name, caplog):
    exp = _old_run(tmp_path, name)
    exp.build_model()
    with caplog.at_level(logging.INFO):
        assert exp.restore() == 6
    assert "averaging anew" not in caplog.text  # restored, not started again
    averager = exp.runner.averager
    anchors = _saved(name, f"{AVERAGER_BEFORE}/anchors")
    assert len(anchors) == len(averager.anchors) > 0
    for held, saved in zip(averager.anchors, anchors, strict=True):
        np.testing.assert_array_equal(held.numpy(), saved)
    momentum = _saved(name, f"{AVERAGER_BEFORE}/momentum")
    assert len(momentum) == len(averager.momentum) == (4 if name == "diloco" else 0)
    for held, saved in zip(averager.momentum, momentum, strict=True):
        np.testing.assert_array_equal(held.numpy(), saved)
        assert np.any(saved)  # a real outer momentum, not a restart's zeros
    # Saved right after an average: kept, not averaged anew from the weights.
    assert int(averager.synced_at.numpy()) == 6
    assert int(averager.replica_weights.gathered_at.numpy()) == -1
    # The weights are those of that average.
    for variable, anchor in zip(exp.model.trainable_variables, anchors, strict=True):
        np.testing.assert_array_equal(np.asarray(variable.value.values[0]), anchor)
    history = exp.fit()
    assert exp.controller.global_step == 12 and history.epoch == [1]


def test_all_reduce_residuals_saved_by_3407276_restore(tmp_path):
    exp = _old_run(tmp_path, "residuals")
    exp.build_model()
    assert exp.restore() == 6
    residuals = exp.controller.parts[-1]
    assert residuals.node == RESIDUALS and not residuals.required
    saved = _saved("residuals", f"{RESIDUALS}/residuals")
    assert len(saved) == len(residuals.value.residuals) > 0
    assert any(np.any(s) for s in saved)
    for variable, value in zip(residuals.value.residuals, saved, strict=True):
        # Saved as the sum over the replicas; read back the same way.
        np.testing.assert_allclose(variable.numpy(), value, rtol=0, atol=0)
    exp.fit()
    assert exp.controller.global_step == 12


def test_a_new_checkpoint_holds_the_averager_as_a_part_of_its_own(tmp_path):
    exp = kdist.Experiment(
        kdist.compose([*JOB, "trainer.epochs=1", *ARGS["diloco"]]), run_dir=tmp_path / "new"
    )
    exp.fit()
    optimizer = exp.model.optimizer
    attached = [name for name in vars(optimizer) if "kdist" in name or "average" in name]
    assert attached == []  # nothing attached to Keras's optimizer
    path = tf.train.latest_checkpoint(str(tmp_path / "new" / "backup"))
    names = [name for name, _ in tf.train.list_variables(path)]
    assert any(n.startswith(f"{AVERAGER}/momentum/") for n in names)
    assert not any(n.startswith(AVERAGER_BEFORE) for n in names)
    parts = {part.node: part.required for part in exp.controller.parts}
    assert parts == {
        "model": True,
        "optimizer": True,
        "state": True,
        "metrics": True,
        "seeds": True,
        AVERAGER: False,
    }
    # And it restores: the momentum comes back as saved.
    again = kdist.Experiment(
        kdist.compose([*JOB, "trainer.epochs=1", *ARGS["diloco"]]), run_dir=tmp_path / "new"
    )
    again.build_model()
    assert again.restore() == 6
    reader = tf.train.load_checkpoint(path)
    momentum = again.runner.averager.momentum
    assert len(momentum) == 4
    for i, held in enumerate(momentum):
        saved = reader.get_tensor(f"{AVERAGER}/momentum/{i}{VALUE}")
        assert np.any(saved)
        np.testing.assert_array_equal(held.numpy(), saved)
