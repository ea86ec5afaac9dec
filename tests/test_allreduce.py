"""trainer.allreduce_dtype: gradients summed across replicas in 16 bits (half the bytes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import LOGICAL, compose, sgd_on_two_replicas

import kdist
from kdist.config import ConfigError
from kdist.config.validate import validate
from kdist.strategies.compression import (
    ErrorFeedback,
    ReducedBytes,
    compress_all_reduce,
    reduced_bytes,
)


def _overrides(tmp_path: Path, name: str, *more: str) -> list[str]:
    return [
        LOGICAL,
        "strategy=mirrored",
        "model=mlp",
        "trainer.epochs=1",
        "trainer.steps_per_epoch=20",
        "trainer.global_batch_size=32",
        "trainer.verbose=0",
        "trainer.validation=false",
        "callbacks=minimal",
        f"run_dir={tmp_path / name}",
        *more,
    ]


def _fit(tmp_path: Path, name: str, *more: str):
    exp = kdist.Experiment(compose(_overrides(tmp_path, name, *more)))
    exp.fit()
    return exp


@pytest.mark.slow
def test_bfloat16_all_reduce_sends_half_the_bytes_and_trains_alike(tmp_path: Path):
    full = _fit(tmp_path, "f32")
    counter = compress_all_reduce(full.optimizer, "float32")  # count only, for the ratio
    half = _fit(tmp_path, "bf16", "trainer.allreduce_dtype=bfloat16")
    fp16 = _fit(tmp_path, "fp16", "trainer.allreduce_dtype=float16")
    half_bytes = reduced_bytes(half.optimizer)
    assert half_bytes is not None and half_bytes.per_step > 0
    # float32 bytes: every trainable weight, 4 bytes each, per replica per step.
    weights = sum(int(np.prod(v.shape)) for v in full.model.trainable_variables)
    assert half_bytes.per_step * 2 == weights * 4
    assert reduced_bytes(fp16.optimizer).per_step == half_bytes.per_step
    assert counter.per_step == 0  # installed after tracing: counts at the next trace only
    for exp in (half, fp16):
        assert int(exp.optimizer.iterations.numpy()) == 20
        loss, ref = exp.metrics()["train"]["loss"], full.metrics()["train"]["loss"]
        assert loss == pytest.approx(ref, rel=0.02)
        for got, want in zip(exp.model.get_weights(), full.model.get_weights(), strict=True):
            np.testing.assert_allclose(got, want, atol=0.02)


def _sgd_on_two_replicas(
    dtype: str, grads: np.ndarray, steps: int = 1, feedback: bool = False
) -> tuple[np.ndarray, ReducedBytes, ErrorFeedback]:
    """`steps` SGD updates (learning rate 1) of the same two replicas' `grads`, summed by
    the optimizer's all-reduce in `dtype`, with or without error feedback: (what was
    applied, the byte counter, the residuals)."""
    made: dict = {}

    def install(optimizer, variable):
        made["residuals"] = ErrorFeedback([variable])
        feed = made["residuals"] if feedback else None
        made["counter"] = compress_all_reduce(optimizer, dtype, feed)

    values = sgd_on_two_replicas(grads, install, steps)
    return -values[-1], made["counter"], made["residuals"]


def _sum_of_replicas(dtype: str) -> tuple[np.ndarray, int, np.ndarray]:
    """Two replicas' gradients summed by the optimizer's all-reduce in `dtype`."""
    grads = np.random.default_rng(0).normal(size=(2, 40, 3)).astype(np.float32)
    applied, counter, _ = _sgd_on_two_replicas(dtype, grads)
    assert counter.dtype == dtype
    return applied, counter.per_step, grads


def test_the_compressed_sum_is_the_sum_in_16_bits_with_half_the_bytes():
    exact, full_bytes, grads = _sum_of_replicas("float32")
    assert full_bytes == 40 * 3 * 4
    np.testing.assert_allclose(exact, grads.sum(axis=0), rtol=1e-6)
    for dtype in ("bfloat16", "float16"):
        got, half_bytes, _ = _sum_of_replicas(dtype)
        assert half_bytes * 2 == full_bytes
        tolerance = 1e-2 if dtype == "bfloat16" else 2e-3
        np.testing.assert_allclose(got, grads.sum(axis=0), rtol=tolerance, atol=tolerance)
        assert not np.array_equal(got, exact)  # summed in 16 bits


def _steps_of_sgd(
    feedback: bool, steps: int, second: float
) -> tuple[np.ndarray, np.ndarray, ErrorFeedback]:
    """`steps` SGD updates of the same two replicas' gradients (the second one's scaled by
    `second`), summed in bfloat16 with or without error feedback: (what was applied, the
    exact sum, the residuals)."""
    grads = np.random.default_rng(1).normal(size=(2, 40, 3)).astype(np.float32)
    grads[1] *= second
    applied, _, residuals = _sgd_on_two_replicas("bfloat16", grads, steps, feedback)
    return applied, steps * grads.sum(axis=0).astype(np.float64), residuals


def test_error_feedback_cancels_the_casts_rounding_over_the_steps():
    steps = 16
    # One replica sends zeros, so the 16-bit sum adds no rounding of its own: what is
    # left is the cast's. The same gradient every step rounds the same way each time:
    # without feedback the error adds up; with it the total is off by one rounding.
    plain, exact, _ = _steps_of_sgd(False, steps, second=0.0)
    fed, _, residuals = _steps_of_sgd(True, steps, second=0.0)
    one_rounding = np.abs(exact / steps).max() * 2.0**-8
    assert np.abs(plain - exact).max() > 4 * one_rounding
    assert np.abs(fed - exact).max() <= 1.01 * one_rounding
    # Each replica keeps its own residual: what its last cast dropped (none for zeros).
    first, other = (v.numpy() for v in residuals.residuals[0].values)
    assert 0 < np.abs(first).max() <= one_rounding
    assert not other.any()
    # Two replicas: the 16-bit sum rounds again (no replica knows the exact sum to feed
    # that back); the casts' share still cancels, so the error is well below plain's.
    plain, exact, _ = _steps_of_sgd(False, steps, second=1.0)
    fed, _, _ = _steps_of_sgd(True, steps, second=1.0)
    assert np.abs(fed - exact).mean() < 0.6 * np.abs(plain - exact).mean()


def test_feed_keeps_what_the_cast_dropped_and_only_casts_other_variables():
    weights, other = tf.Variable(tf.zeros(3)), tf.Variable(tf.zeros(2))
    feedback = ErrorFeedback([weights])
    sent = feedback.feed(tf.constant([1.001, 2.0, 3.0001]), weights, tf.bfloat16)
    assert sent.dtype == tf.bfloat16
    residual = feedback.residuals[0].numpy()
    kept = float(tf.cast(tf.constant(1.001), tf.bfloat16))
    assert residual[0] == np.float32(1.001) - np.float32(kept) != 0
    assert residual[1] == 0  # 2.0 is exact in bfloat16
    # The next gradient gets the residual added before its cast.
    again = feedback.feed(tf.constant([1.001, 2.0, 3.0001]), weights, tf.bfloat16)
    assert feedback.residuals[0].numpy()[0] == np.float32(2 * np.float32(1.001) - kept) - float(
        again[0]
    )
    # A variable without a residual (not given to ErrorFeedback) is only cast.
    assert feedback.residual(other) is None
    assert feedback.feed(tf.constant([1.001, 2.0]), other, tf.bfloat16).dtype == tf.bfloat16


def test_a_run_keeps_its_residuals_in_the_checkpoints_and_can_turn_them_off(tmp_path: Path):
    fed = _fit(tmp_path, "fed", "trainer.allreduce_dtype=bfloat16", "callbacks=default")
    feedback = fed.runner.error_feedback
    assert feedback is not None
    assert reduced_bytes(fed.optimizer).error_feedback == len(fed.model.trainable_variables)
    assert any(np.abs(v.numpy()).max() > 0 for v in feedback.residuals)
    saved = tf.train.latest_checkpoint(str(tmp_path / "fed" / "checkpoints"))
    names = [name for name, _ in tf.train.list_variables(saved)]
    assert sum(name.startswith("allreduce_residuals/") for name in names) == len(feedback.residuals)
    plain = _fit(
        tmp_path,
        "plain",
        "trainer.allreduce_dtype=bfloat16",
        "trainer.allreduce_error_feedback=false",
    )
    assert plain.runner.error_feedback is None
    assert reduced_bytes(plain.optimizer).error_feedback == 0


@pytest.mark.slow
def test_a_resume_restores_the_residuals_and_a_float32_checkpoint_starts_them_at_zero(
    tmp_path: Path,
):
    first = _fit(tmp_path, "run", "trainer.allreduce_dtype=bfloat16", "callbacks=default")
    saved = [v.numpy() for v in first.runner.error_feedback.residuals]
    more = ("trainer.allreduce_dtype=bfloat16", "callbacks=default", "trainer.epochs=2")
    resumed = kdist.Experiment(compose(_overrides(tmp_path, "run", *more)))
    resumed.build_model()
    resumed.restore()
    # Saved as the sum over the replicas, restored as that sum spread evenly over them.
    for variable, total in zip(resumed.runner.error_feedback.residuals, saved, strict=True):
        np.testing.assert_allclose(variable.numpy(), total, rtol=1e-6, atol=1e-12)
    _fit(tmp_path, "f32", "callbacks=default")
    changed = ("trainer.allow_resume_changes=true", *more)
    later = kdist.Experiment(compose(_overrides(tmp_path, "f32", *changed)))
    later.fit()
    assert int(later.optimizer.iterations.numpy()) == 40
    assert later.runner.error_feedback is not None


@pytest.mark.slow
def test_mixed_float16_with_loss_scaling_and_compression_trains(tmp_path: Path):
    exp = _fit(
        tmp_path,
        "mixed",
        "runtime.mixed_precision=mixed_float16",
        "trainer.allreduce_dtype=float16",
    )
    assert isinstance(exp.optimizer, __import__("keras").optimizers.LossScaleOptimizer)
    assert reduced_bytes(exp.optimizer).per_step > 0
    assert np.isfinite(exp.metrics()["train"]["loss"])


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (["trainer.allreduce_dtype=int8"], "is not a valid choice"),
        (["strategy=one_device", "trainer.allreduce_dtype=bfloat16"], "one_device has none"),
        (
            ["strategy=parameter_server", "trainer.allreduce_dtype=float16"],
            "parameter_server has none",
        ),
    ],
)
def test_bad_allreduce_dtype_names_the_key(overrides, problem):
    with pytest.raises(ConfigError) as error:
        validate(compose(overrides))
    assert error.value.key == "trainer.allreduce_dtype"
    assert problem in str(error.value)


def test_bytes_per_pack_is_a_strategy_key():
    cfg = compose(["strategy=multi_worker_mirrored", "strategy.bytes_per_pack=262144"])
    validate(cfg)
    assert cfg.strategy.bytes_per_pack == 262144
    from kdist.strategies import multi_worker_mirrored

    with pytest.raises(ConfigError) as error:
        multi_worker_mirrored(bytes_per_pack=-1, cluster="none")
    assert error.value.key == "strategy.bytes_per_pack"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["trainer.allreduce_dtype=int8"], "trainer.allreduce_dtype"),
        (
            ["strategy=parameter_server", "trainer.allreduce_dtype=bfloat16"],
            "trainer.allreduce_dtype",
        ),
        (["optimizer=sgd", "optimizer.sparse_updates=true"], "optimizer.sparse_updates"),
    ],
)
def test_the_command_line_exits_2_with_one_line_naming_the_key(capsys, overrides, key):
    from kdist.train import precheck

    with pytest.raises(SystemExit) as raised:
        precheck([LOGICAL, *overrides])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err, err


@pytest.mark.slow
@pytest.mark.multiworker
def test_two_workers_save_and_resume_their_residuals(tmp_path: Path):
    import io
    import json

    from helpers import SMALL_JOB, alive, launch_pids

    from kdist.launch import run

    run_dir = tmp_path / "run"
    job = [
        "strategy=multi_worker_mirrored",
        *SMALL_JOB,
        "callbacks=default",
        "callbacks.curves=false",
        "trainer.allreduce_dtype=bfloat16",
    ]
    for epochs in (1, 2):
        log = io.StringIO()
        code = run(2, [*job, f"trainer.epochs={epochs}"], run_dir=run_dir, timeout=240, output=log)
        text = log.getvalue()
        assert code == 0, text[-3000:]
        assert not any(alive(pid) for pid in launch_pids(text).values())
        saved = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
        residuals = {
            name: shape
            for name, shape in tf.train.list_variables(saved)
            if name.startswith("allreduce_residuals/")
        }
        assert len(residuals) == 4  # the MLP's two kernels and two biases
        total = sum(np.abs(tf.train.load_variable(saved, name)).max() for name in residuals)
        assert total > 0  # the sum over both workers of what their casts dropped
    assert "resuming from" in text
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 12 and metrics["num_replicas"] == 2
