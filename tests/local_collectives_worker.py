"""One worker of tests/test_local_collectives.py's 2-worker case (run as a script).

Trains a local SGD job under MultiWorkerMirroredStrategy, then prints one JSON line: the
collective ops of each train function it traced, its batch logs and its epoch logs.
Usage: python local_collectives_worker.py INDEX PORT0,PORT1 RUN_DIR [arrays]
(with `arrays`, the data are numpy arrays given to `fit`, as in a notebook).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

index, ports, run_dir = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
arrays = sys.argv[4:] == ["arrays"]
os.environ["TF_CONFIG"] = json.dumps(
    {
        "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
        "task": {"type": "worker", "index": index},
    }
)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from collective_ops import collective_ops  # noqa: E402
from helpers import compose, sync_job  # noqa: E402

import kdist  # noqa: E402

JOB = [
    "strategy=multi_worker_mirrored",
    "model=mlp",
    "model.units=[32]",
    *sync_job(steps_per_epoch=8, steps_per_execution=2),
    "strategy.sync.mode=local_sgd",
    "strategy.sync.sync_every=4",
]

batches: list[dict[str, float]] = []


class Record(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        batches.append({k: float(v) for k, v in (logs or {}).items()})


exp = kdist.Experiment(compose(JOB), run_dir=f"{run_dir}/worker{index}")
if arrays:
    # 256 examples at global batch 32: 8 steps an epoch, as the config's job.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(256, 16)).astype("float32")
    y = rng.integers(0, 4, size=(256,))
    history = exp.fit(x, y, batch_size=32, epochs=2, callbacks=[Record()])
else:
    history = exp.fit(callbacks=[Record()])
runner = exp.runner
train = runner._train_fn
cells = [c.cell_contents for c in train.__closure__]
variants = dict(zip(train.__code__.co_freevars, cells, strict=True))
args = (runner._iterator, tf.constant(2, tf.int32), *runner._no_snapshot, runner._flags[False])
ops = {}
for name, function in variants.items():
    if isinstance(function, tf.types.experimental.PolymorphicFunction):
        traces = function.experimental_get_tracing_count()
        if traces:
            # The trace the run made (same argument types: no new trace).
            concrete = function.get_concrete_function(*args)
            assert function.experimental_get_tracing_count() == traces
            ops[name] = dict(collective_ops(concrete))
print(
    "RESULT " + json.dumps({"ops": ops, "batches": batches, "epochs": history.history}),
    flush=True,
)
