"""A local train call's metrics: each replica's own, read with no cross-replica operation.

Keras's metrics are sync-on-read variables: read in cross-replica context they are summed
over the replicas, which under `MultiWorkerMirroredStrategy` is one all-reduce across the
workers per metric variable (4 for a loss and an accuracy), and resetting them there reads
them once more. A train call that reads its metrics so waits for every other worker at its
end, and between two averages of local SGD nothing else would. Read in replica context,
each replica sees its own counts and resets its own copy, with no communication.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from kdist.engine.runner import Logs

__all__ = ["own_results", "reset_in_replicas"]


def own_results(strategy: tf.distribute.Strategy, model: keras.Model) -> Logs:
    """The model's metric results as this worker's replicas measured them: each replica's
    own result, averaged over the replicas of this worker (Keras's batch logs under
    `MirroredStrategy`, `reduce_per_replica(..., "auto")`). Call it in cross-replica
    context, inside a compiled call.

    Each replica's result is computed from its own copies of the metric variables
    (`keras.StatelessScope`): a read in replica context would not do, as under
    `MultiWorkerMirroredStrategy` a replica context has no constant replica id and a
    sync-on-read variable converted to a tensor there is summed across the workers.
    """
    variables = [variable for metric in model.metrics for variable in metric.variables]
    copies = [strategy.experimental_local_results(v.value) for v in variables]
    results = []
    for replica in range(len(strategy.extended.worker_devices)):
        mapping = [
            (variable, tf.convert_to_tensor(own[replica]))
            for variable, own in zip(variables, copies, strict=True)
        ]
        with keras.StatelessScope(state_mapping=mapping):
            results.append(
                tf.nest.map_structure(
                    lambda value: tf.cast(tf.convert_to_tensor(value), tf.float32),
                    model.get_metrics_result(),
                )
            )
    if len(results) == 1:
        return results[0]
    return tf.nest.map_structure(lambda *each: tf.reduce_mean(tf.stack(each), axis=0), *results)


def reset_in_replicas(strategy: tf.distribute.Strategy, model: keras.Model) -> None:
    """Reset the model's metrics, each replica its own copy (in replica context)."""
    metrics = list(model.metrics)

    def reset() -> None:
        for metric in metrics:
            metric.reset_state()

    strategy.run(reset)
