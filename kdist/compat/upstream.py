"""How kdist reaches a private name of Keras or TensorFlow, and the error when it moved.

Every private name kdist uses (a `keras.src` or `tensorflow.python` import, an attribute
with a leading underscore) is listed once in `PRIVATE_NAMES`, with the kdist function that
needs it, and reached through `private_import` or `private_attribute`. When an upgrade
moves or renames one, the call fails with `UpstreamMoved`, whose message names the
upstream symbol, the kdist function and the versions kdist was tested with, instead of an
`AttributeError` deep inside a run. `tests/test_compat.py` probes every listed name.

A private method of an upstream class that a kdist subclass overrides (a hook) cannot fail
that way: renamed upstream, the override is simply never called again. `OVERRIDDEN_HOOKS`
lists each one; `tests/test_compat.py` finds every override of a private upstream method in
kdist's classes and fails when it is not listed, or when a listed one no longer overrides
anything (renamed or removed upstream).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OVERRIDDEN_HOOKS",
    "PRIVATE_NAMES",
    "TESTED_WITH",
    "PrivateName",
    "UpstreamMoved",
    "private_attribute",
    "private_import",
    "private_module",
]

# The versions `constraints.txt` pins; `make test-all` on another pair re-checks every name.
TESTED_WITH = "Keras 3.15.1 and TensorFlow 2.21.0"


@dataclass(frozen=True)
class PrivateName:
    """One private name of Keras or TensorFlow that kdist uses.

    Args:
        upstream: the dotted name (`keras.src.losses.loss.unscale_loss_for_distribution`,
            `keras.Model._compile_loss`).
        needed_by: the kdist function or class that needs it.
        why: what it does for kdist that no public name does.
    """

    upstream: str
    needed_by: str
    why: str


class UpstreamMoved(RuntimeError):
    """A private Keras or TensorFlow name kdist needs is not where kdist expects it."""

    def __init__(self, upstream: str, needed_by: str):
        self.upstream = upstream
        self.needed_by = needed_by
        super().__init__(
            f"{upstream} is gone from this Keras/TensorFlow: {needed_by} needs it. kdist "
            f"was tested with {TESTED_WITH} (constraints.txt); install those, or update "
            "kdist.compat for this version."
        )


def private_import(module: str, name: str, needed_by: str) -> Any:
    """`module.name`, or `UpstreamMoved` naming it and `needed_by`."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise UpstreamMoved(f"{module}.{name}", needed_by) from None


def private_module(module: str, needed_by: str) -> Any:
    """The module `module`, or `UpstreamMoved` naming it and `needed_by`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UpstreamMoved(module, needed_by) from None


def private_attribute(obj: Any, name: str, upstream: str, needed_by: str) -> Any:
    """`obj.name`, or `UpstreamMoved` naming `upstream` and `needed_by`."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise UpstreamMoved(upstream, needed_by) from None


PRIVATE_NAMES: tuple[PrivateName, ...] = (
    # Keras: building and checking a model against data.
    PrivateName(
        "keras.src.backend.compute_output_spec",
        "kdist.engine.building.build_for_training, kdist.data.in_hand.inputs.check_inputs",
        "calls a model (or, for a model without `call`, its `train_step`) on symbolic "
        "inputs (what `fit` does before its first step)",
    ),
    PrivateName(
        "keras.Model._symbolic_build",
        "kdist.engine.building.build_for_training",
        "builds compiled losses and metrics from a symbolic batch",
    ),
    PrivateName(
        "keras.Layer._flatten_layers",
        "kdist.engine.building, kdist.engine.state, kdist.experiment.build, "
        "kdist.modeling.lazy_optimizers",
        "every layer of a model, nested ones included",
    ),
    PrivateName(
        "keras.Layer._seed_generators",
        "kdist.engine.state.seed_states",
        "a layer's SeedGenerators, whose state the checkpoint holds",
    ),
    PrivateName(
        "keras.Model._inputs_struct",
        "kdist.data.in_hand.inputs.check_inputs, kdist.experiment",
        "a functional model's input structure (dict keys, number of inputs)",
    ),
    PrivateName(
        "keras.Model._outputs_struct",
        "kdist.config.compile_rules.output_keys",
        "a functional model's output structure",
    ),
    PrivateName(
        "keras.Model._compile_loss",
        "kdist.data.in_hand.inputs.check_inputs",
        "whether the model was compiled with a loss (so needs targets)",
    ),
    PrivateName(
        "tensorflow.python.framework.config.disable_op_determinism",
        "kdist.process.runtime.setup",
        "runtime.deterministic=false after an Experiment that turned op determinism on in "
        "the same process (TensorFlow's public API only turns it on)",
    ),
    # Keras: data given to fit, as its data adapters read it.
    PrivateName(
        "keras.src.trainers.data_adapters.data_adapter_utils.class_weight_to_sample_weights",
        "kdist.data.in_hand.arrays.from_arrays",
        "fit's class_weight for arrays: per-example weights, by Keras's own rule",
    ),
    PrivateName(
        "keras.Model._flatten_metrics_in_order",
        "kdist.experiment.evaluating.keras_return",
        "evaluate's return without return_dict: a scalar or a list in Keras's order",
    ),
    # Keras: the train step kdist runs per replica (Keras's `train_step` contract).
    PrivateName(
        "keras.src.losses.loss.unscale_loss_for_distribution",
        "kdist.engine.step.StepRunner",
        "the loss tracker's value under a strategy, as Keras's train_step logs it",
    ),
    PrivateName(
        "keras.Model._compute_loss",
        "kdist.engine.step.StepRunner",
        "compiled losses, loss weights and model.losses, as Keras's train_step computes them",
    ),
    PrivateName(
        "keras.Model._loss_tracker",
        "kdist.engine.step.StepRunner",
        "the `loss` metric Keras's train_step updates",
    ),
    PrivateName(
        "keras.Model._compile_metrics",
        "kdist.engine.step.StepRunner",
        "the compiled metrics, updated without reading their results every step",
    ),
    PrivateName(
        "keras.Model._call_has_training_arg",
        "kdist.engine.step.StepRunner",
        "whether `call` takes `training`",
    ),
    PrivateName(
        "keras.Model._distribute_strategy",
        "kdist.experiment.build",
        "the strategy a model was created under",
    ),
    PrivateName(
        "keras.src.trainers.compile_utils.CompileMetrics._flat_metrics",
        "kdist.config.objective.metric_directions",
        "the compiled metrics inside Keras's CompileMetrics",
    ),
    PrivateName(
        "keras.metrics.Metric._direction",
        "kdist.config.objective.metric_directions",
        "whether a metric is better up or down",
    ),
    PrivateName(
        "keras.optimizers.Optimizer._learning_rate",
        "kdist.runs.resume_check.optimizer_hyperparameters",
        "tells a constant learning rate (restored by a checkpoint) from a schedule",
    ),
    # Keras: saving and loading.
    PrivateName(
        "keras.src.saving.serialization_lib.SafeModeScope",
        "kdist.evaluation.export.load_model",
        "loads a model with Keras's safe mode on whatever the global setting",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.core.Variable._copy_trackable_to_cpu",
        "kdist.engine.checkpoint (asynchronous saves)",
        "Keras's TensorFlow variable, patched so its host copy can be made twice",
    ),
    PrivateName(
        "keras.src (definition modules of keras.losses, metrics, ...)",
        "kdist.config.trust.trusted_target",
        "Keras's public names are defined in keras.src: trust checks where they live",
    ),
    # TensorFlow.
    PrivateName(
        "tensorflow.python.ops.resource_variable_ops.ResourceVariable",
        "kdist.engine.sync.replica_state",
        "a plain variable on the host inside a strategy's scope: each replica's state for "
        "checkpoints, held once a process rather than once a device",
    ),
    PrivateName(
        "tensorflow.python.distribute.sharded_variable.ShardedVariable",
        "kdist.engine.sharded",
        "parameter-server partitioned variables, which Keras 3 does not support",
    ),
    PrivateName(
        "tensorflow.python.checkpoint.async_checkpoint_helper.AsyncCheckpointHelper",
        "kdist.engine.checkpoint (asynchronous saves)",
        "host copies of a checkpoint's variables, written on kdist's own thread",
    ),
    PrivateName(
        "tf.Variable._copy_trackable_to_cpu",
        "kdist.compat.tf_private.copy_keras_variable_to_cpu",
        "the host copy of the TensorFlow variable inside a Keras variable",
    ),
    PrivateName(
        "tf.train.Checkpoint's _serialize_to_tensors/_restore_from_tensors protocol",
        "kdist.engine.sharded.checkpointable",
        "saves a Keras variable holding a ShardedVariable as one whole value",
    ),
    PrivateName(
        "tf.train.Checkpoint._async_checkpointer, tf.train.Checkpoint._kwargs",
        "kdist.engine.checkpoint (asynchronous saves)",
        "the checkpoint's own async helper, and what makes another",
    ),
    PrivateName(
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver",
        "kdist.cluster.slurm",
        "SLURM's host list and tasks per node, read as TensorFlow's resolver reads them",
    ),
    PrivateName(
        "tf.distribute.ParameterServerStrategy._cluster_resolver",
        "kdist.engine.ps_failures.cluster_spec",
        "the cluster of a ParameterServerStrategy (its public resolver answers None)",
    ),
    PrivateName(
        "tf.data.Dataset._input_dataset, tf.data.Dataset._input_datasets",
        "kdist.data.in_hand.datasets.is_batched",
        "the datasets a dataset was made from (whether it was batched)",
    ),
    # keras-tuner (its distributed search is not public).
    PrivateName(
        "keras_tuner.src.distribute.oracle_chief.OracleServicer",
        "kdist.tuning.oracle_chief.OracleServer",
        "the chief's oracle service, extended to note when each tuner was last heard from",
    ),
    PrivateName(
        "keras_tuner.src.distribute.oracle_client.OracleClient",
        "kdist.tuning.oracle_client.DeadlineOracleClient",
        "the tuners' client of the chief's oracle, given a deadline on every call",
    ),
    PrivateName(
        "keras_tuner.src.protos",
        "kdist.tuning.oracle_chief, kdist.tuning.oracle_client",
        "the oracle service's protocol buffers",
    ),
    PrivateName(
        "keras_tuner.HyperParameters._exists",
        "kdist.models.hypermodel.space.search_space",
        "whether a space declares a name under given conditions (keras-tuner's tuner asks it)",
    ),
    # Hydra.
    PrivateName(
        "hydra._internal.utils._locate",
        "kdist.models.hypermodel.target.locate, kdist.config.targets, kdist.tuning.notebook",
        "reads a dotted path as `instantiate` reads `_target_`, without logging a miss",
    ),
    PrivateName(
        "hydra._internal.utils.get_args_parser",
        "kdist.train, kdist.tune, kdist.launcher.checks",
        "Hydra's command-line flags, read before Hydra runs",
    ),
    PrivateName(
        "hydra._internal.hydra.Hydra, hydra._internal.utils.create_config_search_path",
        "kdist.config.compose",
        "composes a config from kdist's conf/ outside a Hydra app, with Hydra's messages",
    ),
    PrivateName(
        "hydra._internal.utils.create_automatic_config_search_path, "
        "hydra._internal.hydra.Hydra.create_main_hydra2, hydra._internal.callbacks.Callbacks, "
        "hydra._internal.utils.run_and_report",
        "kdist.train (app_hydra, hydra_run_parts)",
        "runs the job of `kdist train` on the config it composed and checked before Hydra "
        "started, as `hydra.main` runs it, where `hydra.main` would compose it twice more",
    ),
    # More private attributes.
    PrivateName(
        "keras.optimizers.Optimizer._all_reduce_sum_gradients",
        "kdist.strategies.compression.compress_all_reduce",
        "the cross-replica gradient sum, replaced to send half-precision gradients",
    ),
    PrivateName(
        "keras.callbacks.TensorBoard._close_writers",
        "kdist.engine.after_failure.close_files",
        "closes TensorBoard's event files when training stops on an error",
    ),
    PrivateName(
        "tf.distribute StrategyExtended.enable_partial_batch_handling",
        "kdist.engine.standard_runner",
        "data given to fit are read without a cross-worker all-reduce at every step",
    ),
    PrivateName(
        "tf.distribute.MirroredStrategy._collective_key_base",
        "kdist.strategies.single_host",
        "a second MirroredStrategy in one process gets collective keys of its own",
    ),
    PrivateName(
        "keras_tuner.Oracle._seed_state",
        "kdist.tuning.oracles.build",
        "the state an oracle's random draws advance, seeded with tuner.seed",
    ),
    PrivateName(
        "omegaconf.Node._get_root",
        "kdist.tuning.oracles",
        "the whole config of the tuner node, to resolve the objective",
    ),
    PrivateName(
        "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
        "kdist.launcher.sweep_launchers.sweep_jobs",
        "Hydra's default sweeper, named by `hydra.sweeper._target_`: its jobs are the product "
        "of the sweeps, so a multirun's size is checked before any job starts",
    ),
    PrivateName(
        "hydra.core.utils.JobReturn._return_value",
        "kdist.runs.sweep.SummaryCallback",
        "a failed job's exception, which JobReturn.return_value re-raises",
    ),
    PrivateName(
        "omegaconf.basecontainer.BaseContainer._resolvers",
        "kdist.config.trust.safe_resolvers",
        "the registered resolvers, narrowed while a file read back from a folder resolves",
    ),
    # Keras: the rules of `fit`'s epoch loop (kdist.compat.keras_private).
    PrivateName(
        "keras.src.trainers.trainer.Trainer._should_eval",
        "kdist.engine.controller.Controller",
        "the epochs after which fit validates (validation_freq: an integer or a list)",
    ),
    PrivateName(
        "keras.Model._initial_epoch",
        "kdist.engine.controller.Controller",
        "the epoch a Keras BackupAndRestore restored, which fit starts at",
    ),
    PrivateName(
        "tf.data.Dataset.batch's _batch_size",
        "kdist.data.in_hand.datasets.from_dataset",
        "a batched dataset's batch size, read from its graph instead of a batch (an "
        "iterator would draw a seeded shuffle's order before training)",
    ),
)

# Private methods of upstream classes that kdist's subclasses override: `upstream` is the
# public class path and the method's name.
OVERRIDDEN_HOOKS: tuple[PrivateName, ...] = (
    PrivateName(
        "keras.callbacks.ProgbarLogger._maybe_init_progbar",
        "kdist.callbacks.progress.ProgressBar",
        "the progress bar kdist draws (examples/s, at most 10 redraws a second)",
    ),
    PrivateName(
        "keras.utils.Progbar._estimate_step_duration",
        "kdist.callbacks.progress.ProgressBar",
        "the step time of a call of several steps, from the measured steps/s",
    ),
    PrivateName(
        "keras.utils.Progbar._format_time",
        "kdist.callbacks.progress.ProgressBar",
        "steps/s and examples/s in place of the time per step",
    ),
    PrivateName(
        "keras.callbacks.TensorBoard._log_epoch_metrics",
        "kdist.callbacks.tensorboard.EpochTensorBoard",
        "one event per writer at an epoch's end instead of one summary call per value",
    ),
    PrivateName(
        "keras.callbacks.TensorBoard._collect_learning_rate",
        "kdist.callbacks.tensorboard.EpochTensorBoard",
        "the learning rate read once, without Keras's slower path for one optimizer",
    ),
    PrivateName(
        "keras.optimizers.LossScaleOptimizer._stateful_handle_finite_grads",
        "kdist.modeling.lazy_optimizers.SparseLossScaleOptimizer",
        "loss scaling for sparse (IndexedSlices) gradients",
    ),
    PrivateName(
        "keras_tuner.Oracle._check_consecutive_failures",
        "kdist.tuning.oracles",
        "failed trials counted without raising before the trial and the oracle are saved",
    ),
    PrivateName(
        "keras_tuner.Oracle._save_trial",
        "kdist.tuning.oracles",
        "a trial's file written whole (a temporary file, then renamed)",
    ),
)
