"""Row-sparse Adam and Adagrad (kdist.modeling.lazy_optimizers) against a NumPy reference.

Lazy Adam (TensorFlow Addons' semantics): for the rows a batch looked up (duplicate ids
summed), m and v move as in Adam and the row takes Adam's bias-corrected step; every
other row, and its moments, is left as it is. Dense gradients get Keras's Adam.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import compose

import kdist
from kdist.config import ConfigError
from kdist.config.validate import validate
from kdist.modeling import optimizers
from kdist.modeling.lazy_optimizers import LazyAdagrad, LazyAdam, is_lazy, sparse_lookups
from kdist.strategies import mirrored

ROWS, DIM = 5000, 8


def _reference_lazy_adam(table, batches, *, lr=0.01, b1=0.9, b2=0.999, eps=1e-7):
    """NumPy lazy Adam: returns (table, m, v) after applying `batches` of (ids, rows)."""
    table = table.astype(np.float64).copy()
    m, v = np.zeros_like(table), np.zeros_like(table)
    for step, (ids, values) in enumerate(batches, start=1):
        unique, positions = np.unique(ids, return_inverse=True)
        grad = np.zeros((len(unique), table.shape[1]))
        np.add.at(grad, positions, values)
        m[unique] = b1 * m[unique] + (1 - b1) * grad
        v[unique] = b2 * v[unique] + (1 - b2) * grad**2
        alpha = lr * np.sqrt(1 - b2**step) / (1 - b1**step)
        table[unique] -= alpha * m[unique] / (np.sqrt(v[unique]) + eps)
    return table, m, v


def _batches(count: int, touched: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ids = rng.integers(0, ROWS // 2, size=touched).astype(np.int32)  # duplicates too
        out.append((ids, rng.normal(size=(touched, DIM)).astype(np.float32)))
    return out


def test_lazy_adam_matches_the_numpy_reference_moments_included():
    start = np.random.default_rng(1).normal(size=(ROWS, DIM)).astype(np.float32)
    table = keras.Variable(start)
    kernel = keras.Variable(np.ones((3, 2), np.float32))
    dense_twin = keras.Variable(np.ones((3, 2), np.float32))
    optimizer, reference_adam = LazyAdam(learning_rate=0.01), keras.optimizers.Adam(0.01)
    optimizer.build([table, kernel])
    reference_adam.build([dense_twin])
    batches = _batches(4)
    for ids, values in batches:
        sparse = tf.IndexedSlices(tf.constant(values), tf.constant(ids))
        dense = tf.fill((3, 2), float(ids[0] % 7) - 3.0)
        optimizer.apply_gradients([(sparse, table), (dense, kernel)])
        reference_adam.apply_gradients([(dense, dense_twin)])
    want, want_m, want_v = _reference_lazy_adam(start, batches)
    m, v = (optimizer._momentums[0].numpy(), optimizer._velocities[0].numpy())
    np.testing.assert_allclose(table.numpy(), want, atol=1e-6, rtol=0)
    np.testing.assert_allclose(m, want_m, atol=1e-6, rtol=0)
    np.testing.assert_allclose(v, want_v, atol=1e-6, rtol=0)
    # Rows never looked up: the table unchanged, bit for bit, and zero moments.
    untouched = np.setdiff1d(np.arange(ROWS), np.concatenate([ids for ids, _ in batches]))
    assert len(untouched) > ROWS // 2
    assert np.array_equal(table.numpy()[untouched], start[untouched])
    assert not m[untouched].any() and not v[untouched].any()
    # A dense gradient gets Keras's Adam.
    np.testing.assert_allclose(kernel.numpy(), dense_twin.numpy(), atol=1e-7)


def test_lazy_adagrad_matches_the_numpy_reference():
    start = np.random.default_rng(2).normal(size=(ROWS, DIM)).astype(np.float32)
    table = keras.Variable(start)
    optimizer = LazyAdagrad(learning_rate=0.05, initial_accumulator_value=0.1)
    optimizer.build([table])
    want, acc = start.astype(np.float64).copy(), np.full(start.shape, 0.1)
    for ids, values in _batches(3, seed=5):
        optimizer.apply_gradients([(tf.IndexedSlices(values, ids), table)])
        unique, positions = np.unique(ids, return_inverse=True)
        grad = np.zeros((len(unique), DIM))
        np.add.at(grad, positions, values)
        acc[unique] += grad**2
        want[unique] -= 0.05 * grad / np.sqrt(acc[unique] + 1e-7)
    np.testing.assert_allclose(table.numpy(), want, atol=1e-6, rtol=0)
    # Accumulators grow past 10: float32 holds them to 1e-6 relative, not absolute.
    np.testing.assert_allclose(optimizer._accumulators[0].numpy(), acc, atol=1e-6, rtol=1e-6)


def _embedding_model():
    inputs = keras.Input((4,), dtype="int32")
    x = keras.layers.Embedding(ROWS, DIM, name="table")(inputs)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(x))


def test_sparse_lookups_read_rows_and_keep_the_outputs():
    model = _embedding_model()
    ids = np.array([[1, 2, 3, 1], [9, 8, 7, 6]], np.int32)
    before = model(ids).numpy()
    assert sparse_lookups(model) == 1
    np.testing.assert_allclose(model(ids).numpy(), before, rtol=1e-6)
    # The gradient of the table stays IndexedSlices (no densifying on the way).
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(ids))
    grads = tape.gradient(loss, model.trainable_variables)
    assert isinstance(grads[0], tf.IndexedSlices)
    assert is_lazy(LazyAdam()) and is_lazy(keras.optimizers.LossScaleOptimizer(LazyAdagrad()))
    assert not is_lazy(keras.optimizers.Adam())


def test_mirrored_all_reduce_keeps_the_gradient_sparse_and_updates_the_union_of_rows():
    strategy = mirrored(devices=["/cpu:0", "/cpu:1"])
    start = np.random.default_rng(3).normal(size=(ROWS, DIM)).astype(np.float32)
    with strategy.scope():
        table = keras.Variable(start)
        optimizer = LazyAdam(learning_rate=0.01)
        optimizer.build([table])
    per_replica_ids = [np.arange(0, 40, dtype=np.int32), np.arange(20, 60, dtype=np.int32)]
    values = np.random.default_rng(4).normal(size=(40, DIM)).astype(np.float32)
    seen: list[type] = []

    @tf.function
    def step():
        def replica_fn():
            index = tf.distribute.get_replica_context().replica_id_in_sync_group
            ids = tf.gather(tf.constant(np.stack(per_replica_ids)), index)
            gradient = tf.IndexedSlices(tf.constant(values), ids)
            reduced = tf.distribute.get_replica_context().all_reduce("sum", [gradient])
            seen.append(type(reduced[0]))
            optimizer.apply_gradients([(gradient, table)])

        strategy.run(replica_fn)

    step()
    assert tf.IndexedSlices in seen  # an all-reduce of IndexedSlices stays IndexedSlices
    all_ids = np.concatenate(per_replica_ids)
    want, _, _ = _reference_lazy_adam(start, [(all_ids, np.concatenate([values, values]))])
    for replica_value in strategy.experimental_local_results(table.value):
        np.testing.assert_allclose(replica_value.numpy(), want, atol=1e-6, rtol=0)
    assert np.array_equal(table.numpy()[60:], start[60:])


def test_sparse_updates_config_builds_the_lazy_form_and_rejects_others():
    cfg = compose(["optimizer.sparse_updates=true"])
    validate(cfg)
    optimizer = optimizers.build(cfg.optimizer)
    assert type(optimizer) is LazyAdam
    assert float(optimizer.learning_rate) == pytest.approx(1e-3)
    adagrad = optimizers.build(
        compose(["optimizer=adagrad", "optimizer.sparse_updates=true"]).optimizer
    )
    assert type(adagrad) is LazyAdagrad
    for option in ("sgd", "adamw"):
        bad = compose([f"optimizer={option}", "optimizer.sparse_updates=true"])
        with pytest.raises(ConfigError) as error:
            validate(bad)
        assert error.value.key == "optimizer.sparse_updates"
        assert "no row-sparse form" in str(error.value)
        with pytest.raises(ConfigError, match=r"optimizer\.sparse_updates"):
            optimizers.build(bad.optimizer)


def _wide_deep(tmp_path: Path, name: str, *more: str) -> list[str]:
    return [
        "model=wide_deep",
        "model.num_buckets=50000",
        "data=categorical",
        "data.source.num_train=512",
        "data.source.num_validation=128",
        "optimizer.sparse_updates=true",
        "trainer.epochs=2",
        "trainer.steps_per_epoch=6",
        "trainer.steps_per_execution=1",
        "trainer.global_batch_size=64",
        "trainer.verbose=0",
        "callbacks.backup.every_n_steps=4",
        "callbacks.saved_model=false",
        f"run_dir={tmp_path / name}",
        *more,
    ]


@pytest.mark.slow
def test_resume_with_lazy_adam_is_step_exact(tmp_path: Path):
    # Op determinism on both sides: without it, 20 of the deep table's 800,000 weights
    # differed by up to 1.7e-6 in one test-all on a loaded 2-core machine (the order of
    # the sparse updates' sums), and the same run alone passed.
    exact = "runtime.deterministic=true"
    stopped = kdist.Experiment(
        compose(
            _wide_deep(
                tmp_path, "run", exact, "callbacks.extra=[{_target_: helpers.StopAtStep, step: 5}]"
            )
        )
    )
    stopped.fit()
    assert type(stopped.model.optimizer) is LazyAdam
    assert int(stopped.optimizer.iterations.numpy()) == 5
    resumed = kdist.Experiment(compose(_wide_deep(tmp_path, "run", exact)))
    resumed.fit()
    reference = kdist.Experiment(compose(_wide_deep(tmp_path, "reference", exact)))
    reference.fit()
    assert int(resumed.optimizer.iterations.numpy()) == 12
    for got, want in zip(resumed.model.get_weights(), reference.model.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
    slots = [np.asarray(v) for v in resumed.optimizer.variables]
    ref_slots = [np.asarray(v) for v in reference.optimizer.variables]
    for got, want in zip(slots, ref_slots, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
    # Lazy: most rows of the 50,000-row deep table were never looked up, moments zero.
    m = resumed.optimizer._momentums[
        resumed.optimizer._get_variable_index(resumed.model.get_layer("deep_embedding").embeddings)
    ]
    assert (np.abs(np.asarray(m)).sum(axis=1) == 0).mean() > 0.5


@pytest.mark.slow
@pytest.mark.multiworker
def test_parameter_servers_train_sharded_tables_with_lazy_adam(tmp_path: Path):
    import io

    from kdist.launch import run

    log = io.StringIO()
    overrides = [
        "strategy=parameter_server",
        "strategy.min_shard_bytes=65536",
        "strategy.steps_per_schedule=4",
        "model=wide_deep",
        "model.num_buckets=50000",
        "data=categorical",
        "data.source.num_train=2048",
        "data.source.num_validation=256",
        "data.source.vocab_size=50000",
        "optimizer.sparse_updates=true",
        "trainer.epochs=2",
        "trainer.steps_per_epoch=8",
        "trainer.global_batch_size=128",
        "trainer.verbose=0",
        "callbacks=minimal",
    ]
    code = run(2, overrides, ps=2, run_dir=tmp_path / "run", timeout=300, output=log)
    text = log.getvalue()
    assert code == 0, text[-3000:]
    # The tables are split over both ps, and each update runs where its shard lives.
    assert "deep_embedding/embeddings: 2 shards on ps 0, ps 1" in text
    assert "this local cluster (2 worker(s) + 2 ps) trained" in text
    assert "trained 16 steps" in text


def test_accumulated_sparse_gradients_stay_sparse():
    from kdist.engine.step import _add, _divide

    a = tf.IndexedSlices(tf.ones((2, 3)), tf.constant([1, 4]), tf.constant([6, 3]))
    b = tf.IndexedSlices(2 * tf.ones((2, 3)), tf.constant([4, 5]), tf.constant([6, 3]))
    (total,) = _add([a], [b])
    assert isinstance(total, tf.IndexedSlices)
    mean = _divide(total, 2)
    assert isinstance(mean, tf.IndexedSlices)
    want = np.zeros((6, 3), np.float32)
    want[1], want[4], want[5] = 0.5, 1.5, 1.0
    np.testing.assert_allclose(tf.convert_to_tensor(mean).numpy(), want)


def test_loss_scaling_keeps_the_update_lazy():
    from kdist.modeling.lazy_optimizers import SparseLossScaleOptimizer

    table = keras.Variable(np.ones((100, 4), np.float32))
    optimizer = SparseLossScaleOptimizer(LazyAdam(learning_rate=0.1))
    optimizer.build([table])
    scale = float(optimizer.dynamic_scale.numpy())
    first = tf.IndexedSlices(tf.fill((2, 4), scale), tf.constant([1, 2]))
    optimizer.apply_gradients([(first, table)])
    after_first = table.numpy().copy()
    assert not np.allclose(after_first[[1, 2]], 1.0)
    second = tf.IndexedSlices(tf.fill((1, 4), scale), tf.constant([7]))
    optimizer.apply_gradients([(second, table)])
    # Row 1 (not looked up in step 2) is left alone: dense Adam would move it again.
    np.testing.assert_array_equal(table.numpy()[[1, 2]], after_first[[1, 2]])
    # Unscaled (a gradient of 1): lazy Adam's first move of a row at global step 2.
    alpha = 0.1 * np.sqrt(1 - 0.999**2) / (1 - 0.9**2)
    np.testing.assert_allclose(table.numpy()[7], 1.0 - alpha * 0.1 / np.sqrt(0.001), rtol=1e-4)
    infinite = tf.IndexedSlices(tf.fill((1, 4), np.inf), tf.constant([9]))
    optimizer.apply_gradients([(infinite, table)])
    assert float(optimizer.dynamic_scale.numpy()) == scale / 2  # skipped and halved
    assert np.all(np.isfinite(table.numpy()))
    built = optimizers.build(
        compose(["optimizer.sparse_updates=true"]).optimizer, mixed_precision="mixed_float16"
    )
    assert type(built) is SparseLossScaleOptimizer and type(built.inner_optimizer) is LazyAdam
