"""The training input of a `MultiWorkerMirroredStrategy` worker with one CPU device: its
own input pipeline, iterated in the train function (`StandardRunner._distribute_train`),
numbered as the strategy numbers it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import tensorflow as tf
from helpers import compose
from tensorflow.python.distribute import multi_worker_util

import kdist
from kdist.engine.standard_runner import worker_input_context

CLUSTERS = [
    ({}, None, None),
    ({"worker": ["a:1", "b:2"]}, "worker", 0),
    ({"worker": ["a:1", "b:2"]}, "worker", 1),
    ({"chief": ["c:0"], "worker": ["a:1", "b:2"]}, "chief", 0),
    ({"chief": ["c:0"], "worker": ["a:1", "b:2"]}, "worker", 1),
]


@pytest.mark.parametrize(("jobs", "task_type", "task_id"), CLUSTERS)
def test_the_worker_input_context_is_the_strategys(jobs, task_type, task_id):
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(jobs), task_type=task_type, task_id=task_id
    )
    strategy = SimpleNamespace(cluster_resolver=resolver, num_replicas_in_sync=3)
    context = worker_input_context(strategy)
    # TensorFlow's own numbering (`CollectiveAllReduceExtended._make_input_context`).
    expected = (
        (1, 0)
        if not jobs
        else (
            multi_worker_util.worker_count(jobs, task_type),
            multi_worker_util.id_in_cluster(jobs, task_type, task_id),
        )
    )
    assert (context.num_input_pipelines, context.input_pipeline_id) == expected
    assert context.num_replicas_in_sync == 3


def test_a_worker_with_one_cpu_iterates_its_own_pipeline(tmp_path):
    # In a process of its own: the strategy turns collectives on for the process.
    code = textwrap.dedent(
        f"""
        import tensorflow as tf
        import kdist
        from kdist import compose

        exp = kdist.Experiment(
            compose(["strategy=multi_worker_mirrored", "data=synthetic",
                     "data.source.num_train=64", "data.source.num_validation=16",
                     "data.source.input_shape=[8,8,1]", "trainer.global_batch_size=8"]),
            run_dir={str(tmp_path)!r},
        )
        exp.build_model()
        data = exp.runner._train_data
        assert isinstance(data, tf.data.Dataset), type(data)
        exp.fit(epochs=1, verbose=0)
        print("steps", exp.controller.global_step)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "steps 8" in done.stdout


def test_the_default_strategy_reads_its_data_through_the_strategy(tmp_path):
    # `tf.distribute.get_strategy()` lists no devices (`worker_devices` raises): its input
    # goes the strategy's own way. 940e68a asked it for its devices first, and a run under
    # the default strategy failed before its first step.
    exp = kdist.Experiment(
        compose(
            [
                "model=mlp",
                "trainer=fast_dev",
                "trainer.verbose=0",
                "callbacks=minimal",
                "strategy=auto",
                "strategy._target_=tensorflow.distribute.get_strategy",
            ]
        ),
        run_dir=tmp_path / "run",
    )
    assert exp.strategy is tf.distribute.get_strategy()
    exp.fit()
    assert int(exp.optimizer.iterations.numpy()) == exp.controller.end_step() > 0
