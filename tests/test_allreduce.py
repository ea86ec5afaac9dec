"""trainer.allreduce_dtype: gradients summed across replicas in 16 bits (half the bytes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import LOGICAL, compose

import kdist
from kdist.config import ConfigError
from kdist.config.validate import validate
from kdist.strategies import mirrored
from kdist.strategies.compression import compress_all_reduce, reduced_bytes


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


def _sum_of_replicas(dtype: str) -> tuple[np.ndarray, int, np.ndarray]:
    """Two replicas' gradients summed by the optimizer's all-reduce in `dtype`."""
    import keras

    strategy = mirrored(devices=["/cpu:0", "/cpu:1"])
    with strategy.scope():
        variable = keras.Variable(np.zeros((40, 3), np.float32))
        optimizer = keras.optimizers.SGD(learning_rate=1.0)
        optimizer.build([variable])
    counter = compress_all_reduce(optimizer, dtype)
    grads = np.random.default_rng(0).normal(size=(2, 40, 3)).astype(np.float32)

    @tf.function
    def step():
        def replica_fn():
            index = tf.distribute.get_replica_context().replica_id_in_sync_group
            optimizer.apply_gradients([(tf.gather(tf.constant(grads), index), variable)])

        strategy.run(replica_fn)

    step()
    assert counter.dtype == dtype
    return -variable.numpy(), counter.per_step, grads


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
