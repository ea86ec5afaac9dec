"""A hand-written multi-worker program, to run in place of `kdist.train` for comparison.

TensorFlow's "Custom training loop with MultiWorkerMirroredStrategy" tutorial, on the
cluster benchmark's job (the MNIST CNN on synthetic 28x28x1 data, global batch 128,
Adam): each worker shards the shuffled stream by input pipeline, `strategy.run` inside a
`tf.function` running 16 steps per call. It prints the same probe lines as kdist's run,
so `kdist.launch` can start it on every worker:

```python
from kdist.launch import run
run(workers=2, module="benchmarks.mwms_loop")
```
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # after the log level, as a user's script would
import tensorflow as tf

__all__: list[str] = []

# The job of `benchmarks.cluster` (its environment knobs included).
BATCH = int(os.environ.get("KDIST_BENCH_BATCH", "128"))
STEPS_PER_EPOCH = int(os.environ.get("KDIST_BENCH_STEPS", "16"))
STEPS_PER_CALL, EPOCHS = 16, 2


def main() -> None:
    from kdist.data.builtin import synthetic
    from kdist.models import build

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = synthetic(num_train=4096, num_validation=0).arrays("train")
    with strategy.scope():
        model = build("cnn", input_shape=(28, 28, 1), num_classes=10)
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return (
            tf.data.Dataset.from_tensor_slices((x, y))
            .cache()
            .shuffle(4096, seed=42)
            .repeat()
            .shard(context.num_input_pipelines, context.input_pipeline_id)
            .batch(context.get_per_replica_batch_size(BATCH), drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
        )

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    def step(features: tf.Tensor, labels: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=BATCH)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))

    @tf.function
    def train_function(iterator: object) -> None:
        for _ in tf.range(STEPS_PER_CALL):
            strategy.run(step, args=next(iterator))  # type: ignore[call-overload]

    for epoch in range(EPOCHS):
        started = time.perf_counter()
        for _ in range(STEPS_PER_EPOCH // STEPS_PER_CALL):
            train_function(iterator)
        seconds = time.perf_counter() - started
        print(
            f"kdist-bench epoch index={epoch} seconds={seconds:.6f} steps={STEPS_PER_EPOCH} "
            f"batch={BATCH}",
            flush=True,
        )


if __name__ == "__main__":
    main()
