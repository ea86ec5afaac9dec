"""Typed schemas behind the YAML in `conf/`.

One dataclass per config group (and per option where the options' keys differ), stored
in Hydra's ConfigStore as `base_<option>` in the group. Each YAML option starts with
`defaults: [base_<option>, _self_]`, so a wrong type or an unknown key fails while Hydra
composes the config, naming the key, before TensorFlow is imported.

Nodes that point at a callable with `_target_` whose keyword arguments are open-ended
(the data source, a user's model) are typed `Any` here; `kdist.config.validate` checks
their keys against the callable's signature instead.

It stays one file (over 400 lines): `_OPTION_SCHEMAS` and `_GROUP_SCHEMAS`, at the end,
register every group's schemas as one table next to the dataclasses they name, and a
section per group keeps it easy to skim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING

from kdist.config.groups import GROUPS

__all__ = [
    "AdagradConfig",
    "AdamConfig",
    "AdamWConfig",
    "AugmentConfig",
    "AutoStrategyConfig",
    "BayesianTunerConfig",
    "CNNConfig",
    "CallbacksConfig",
    "DataConfig",
    "HyperbandTunerConfig",
    "MLPConfig",
    "MirroredStrategyConfig",
    "MultiWorkerMirroredStrategyConfig",
    "ObjectiveConfig",
    "OneDeviceStrategyConfig",
    "OptimizerConfig",
    "ParameterServerStrategyConfig",
    "RandomTunerConfig",
    "ResNetConfig",
    "RuntimeConfig",
    "SGDConfig",
    "TrainConfig",
    "TrainerConfig",
    "TransformerConfig",
    "TunerConfig",
    "TunerDistributedConfig",
    "TunerObjectiveConfig",
    "WideDeepConfig",
    "register",
]


# --- strategy ---------------------------------------------------------------------------


@dataclass
class SyncConfig:
    """`strategy.sync`: how often the replicas average their weights (`kdist.config.sync`)."""

    # every_step (all-reduce the gradients at every step), local_sgd or diloco (each replica
    # applies its own gradients; the weights are averaged every sync_every steps).
    mode: str = "every_step"
    # local_sgd/diloco: average the weights every this many steps (a positive integer).
    sync_every: int = 8
    # First steps trained with every_step before local steps begin (post-local SGD).
    warmup_steps: int = 0
    # diloco's outer SGD with Nesterov momentum on the averaged change (measured, 5 seeds:
    # within 1 point of every_step at sync_every 16-64; the paper's 0.7/0.9 was not).
    outer_learning_rate: float = 0.8
    # diloco's outer Nesterov momentum (measured with outer_learning_rate; the paper: 0.9).
    outer_momentum: float = 0.6
    # local_sgd/diloco: steps an average's all-reduce runs beside the local steps before it
    # is applied (each replica keeps what it learnt meanwhile); 0 averages at once.
    overlap_steps: int = 0


@dataclass
class AutoStrategyConfig:
    _target_: str = "kdist.strategies.auto"
    sync: SyncConfig = field(default_factory=SyncConfig)


@dataclass
class OneDeviceStrategyConfig:
    _target_: str = "kdist.strategies.one_device"
    device: str | None = None
    sync: SyncConfig = field(default_factory=SyncConfig)


@dataclass
class MirroredStrategyConfig:
    _target_: str = "kdist.strategies.mirrored"
    devices: list[str] | None = None
    cross_device_ops: str = "auto"
    sync: SyncConfig = field(default_factory=SyncConfig)


@dataclass
class _ClusterStrategyConfig:
    """The keys of every multi-process strategy: where its cluster comes from."""

    _target_: str = MISSING
    cluster: str = "auto"
    port_base: int = 8888
    sync: SyncConfig = field(default_factory=SyncConfig)


@dataclass
class MultiWorkerMirroredStrategyConfig(_ClusterStrategyConfig):
    _target_: str = "kdist.strategies.multi_worker_mirrored"
    communication: str = "auto"
    timeout_seconds: float | None = None
    # Split each all-reduce into packs of about this many bytes; 0: TensorFlow's choice.
    bytes_per_pack: int = 0


@dataclass
class ParameterServerStrategyConfig(_ClusterStrategyConfig):
    _target_: str = "kdist.strategies.parameter_server"
    # Optimizer steps per function the chief schedules on a worker.
    steps_per_schedule: int = 8
    # Variable sharding over the ps: set min_shard_bytes or max_shard_bytes (not both).
    min_shard_bytes: int | None = None
    max_shard_bytes: int | None = None
    max_shards: int | None = None


# --- model ------------------------------------------------------------------------------


@dataclass
class MLPConfig:
    _target_: str = "kdist.models.mlp"
    units: list[int] = field(default_factory=lambda: [128])
    dropout: float = 0.0
    activation: str = "relu"


@dataclass
class CNNConfig:
    _target_: str = "kdist.models.cnn"
    filters: list[int] = field(default_factory=lambda: [32, 64])
    kernel_size: int = 5
    dense_units: int = 1024
    dropout: float = 0.0


@dataclass
class ResNetConfig:
    _target_: str = "kdist.models.resnet"
    # resnet20, resnet32, resnet44, resnet56, resnet110 (32x32 images) or resnet50
    # (keras.applications, weights=None).
    variant: str = "resnet20"
    width: int = 16
    weight_decay: float = 1e-4


@dataclass
class TransformerConfig:
    _target_: str = "kdist.models.transformer"
    vocab_size: int = 1000
    embed_dim: int = 64
    num_heads: int = 4
    ff_dim: int = 128
    num_layers: int = 2
    dropout: float = 0.1
    mask_padding: bool = True


@dataclass
class WideDeepConfig:
    _target_: str = "kdist.models.wide_deep"
    num_buckets: int = 20_000
    embedding_dim: int = 16
    units: list[int] = field(default_factory=lambda: [64])
    dropout: float = 0.0


# --- data -------------------------------------------------------------------------------


@dataclass
class AugmentConfig:
    """`data.augment`: training-time image augmentation (kdist.data.augment)."""

    # null, horizontal, vertical or horizontal_and_vertical
    random_flip: str | None = None
    # Zero-pad each side by this many pixels, then crop back at random (0: off).
    random_crop_padding: int = 0


@dataclass
class DataConfig:
    # `_target_` node building a `kdist.data.Source`; its keys are checked against the
    # callable's signature by `kdist.config.validate`.
    source: Any = None
    # Shuffle the training examples (a new order every epoch, the same for a given runtime.seed on
    # every worker); validation data is read in order.
    shuffle: bool = True
    # Examples held in tf.data's shuffle buffer; capped at the training set's size (a buffer that
    # holds it all gives a uniform shuffle).
    shuffle_buffer: int = 10_000
    # Keep the source's examples in memory after the first pass (tf.data `cache()`), before
    # shuffling.
    cache: bool = True
    # How the training data is divided over the input pipelines (one per worker): auto (file when
    # every pipeline gets a non-empty file, else data), file (whole files per worker), data (every
    # n-th example after the shuffle: the same global batches under every strategy) or off (every
    # worker reads everything). Validation is always divided by example.
    shard_policy: str = "auto"
    augment: AugmentConfig = field(default_factory=AugmentConfig)


# --- optimizer --------------------------------------------------------------------------


@dataclass
class OptimizerConfig:
    """Keys common to every optimizer; kdist's own keys are removed before Keras sees them."""

    _target_: str = "keras.optimizers.Adam"
    _partial_: bool = True
    # The peak learning rate (before lr_scaling with the replica count and the schedule).
    learning_rate: float = 1e-3
    # kdist: scale `learning_rate` with the replica count: none, linear or sqrt.
    lr_scaling: str = "none"
    # kdist: learning-rate schedule (kdist.modeling.schedules): null (constant) or cosine, after
    # `warmup_steps` of linear warm-up; cosine decays over `decay_steps` (null: the rest
    # of the run) down to `alpha` times the peak rate.
    schedule: str | None = None
    # Optimizer steps of linear warm-up from 0 to the peak rate (0: none); with schedule: null the
    # rate then stays constant.
    warmup_steps: int = 0
    # Steps of the cosine decay after the warm-up (schedule: cosine); null: the rest of the run.
    decay_steps: int | None = None
    # Where the cosine decay ends, as a fraction of the peak rate (schedule: cosine).
    alpha: float = 0.0
    # Clip each gradient to this L2 norm (Keras's `clipnorm`); null: no clipping.
    clipnorm: float | None = None
    # kdist: true updates only the embedding rows a batch looked up, moments included
    # (kdist.modeling.lazy_optimizers: Adam and Adagrad have a row-sparse form; others stop,
    # status 2).
    sparse_updates: bool = False


@dataclass
class AdamConfig(OptimizerConfig):
    # Decay rate of the first-moment (mean) estimates, as in keras.optimizers.Adam.
    beta_1: float = 0.9
    # Decay rate of the second-moment (variance) estimates, as in keras.optimizers.Adam.
    beta_2: float = 0.999
    # Small constant added to the denominator for numerical stability, as in Keras.
    epsilon: float = 1e-7


@dataclass
class AdamWConfig(AdamConfig):
    _target_: str = "keras.optimizers.AdamW"
    # Decoupled weight decay applied at each step, as in keras.optimizers.AdamW.
    weight_decay: float = 0.004


@dataclass
class AdagradConfig(OptimizerConfig):
    _target_: str = "keras.optimizers.Adagrad"
    # The peak learning rate (Keras's Adagrad default is 0.001; kdist uses 0.01).
    learning_rate: float = 0.01
    # Starting value of the per-parameter sums of squared gradients, as in keras.optimizers.Adagrad.
    initial_accumulator_value: float = 0.1
    # Small constant added to the denominator for numerical stability, as in Keras.
    epsilon: float = 1e-7


@dataclass
class SGDConfig(OptimizerConfig):
    _target_: str = "keras.optimizers.SGD"
    # The peak learning rate (before lr_scaling and the schedule).
    learning_rate: float = 0.01
    # Momentum factor (0: plain SGD, which keeps embedding updates sparse), as in
    # keras.optimizers.SGD.
    momentum: float = 0.0
    # Use Nesterov momentum, as in keras.optimizers.SGD.
    nesterov: bool = False


# --- trainer ----------------------------------------------------------------------------


@dataclass
class TrainerConfig:
    # Passes over the training data (each steps_per_epoch steps long).
    epochs: int = 10
    # Optimizer steps per epoch; null: the training examples divided by the global batch (the data
    # repeats when it is larger).
    steps_per_epoch: int | None = None
    # Examples per optimizer step over all replicas; split evenly over them, so it must be divisible
    # by the replica count.
    global_batch_size: int | None = 64
    # Examples per replica per step, instead of global_batch_size (set that to null): the
    # global batch is then this times the replicas, growing with the cluster as
    # optimizer.lr_scaling assumes.
    per_replica_batch_size: int | None = None
    # Optimizer steps run inside one tf.function call (Keras's `steps_per_execution`; the
    # default trainer sets 8, Keras's fit uses 1). A callback's on_train_batch_begin/end run
    # once per call, i.e. every K steps (kdist logs this once); set 1 to call them every step.
    steps_per_execution: int = 1
    # Validate every this many epochs (the last epoch always validates).
    validation_freq: int = 1
    # Batches read by each validation (Keras's `validation_steps`); null: all of the
    # validation data (which must then have an end).
    validation_steps: int | None = None
    # Examples per validation batch (Keras's `validation_batch_size`); null: the training
    # global batch (fit with data that brings its own batches validates arrays in 32s, as
    # Keras does).
    validation_batch_size: int | None = None
    # Evaluate on the validation split after the epochs validation_freq picks; false: no val_
    # metrics.
    validation: bool = True
    # Keras's progress setting: 0 silent, 1 a progress bar, 2 one line per epoch.
    verbose: int = 1
    # Micro-batches per optimizer update: global_batch_size / accumulate_steps examples
    # each, gradients averaged, one update (the same as one step on the global batch).
    accumulate_steps: int = 1
    # The type gradients are all-reduced in (kdist.strategies.compression): float32, or
    # bfloat16 / float16 for half the bytes (mirrored and multi-worker strategies only).
    allreduce_dtype: str = "float32"
    # With a 16-bit allreduce_dtype: each replica adds what the cast dropped from a gradient
    # to its next one (error feedback), so rounding errors cancel over the steps instead of
    # adding up; one float32 copy of the weights per replica, saved with the checkpoints.
    allreduce_error_feedback: bool = True
    # true: every BatchNormalization layer (the user's models' too) computes its
    # statistics over the global batch (Keras's synchronized=True) under mirrored and
    # multi-worker strategies.
    sync_batchnorm: bool = False
    # What `model.compile` takes (kdist.config.compile_rules): a Keras name (mse), a _target_
    # node, or a mapping from output names to those. null: SparseCategoricalCrossentropy on logits,
    # what kdist's built-in classifiers output. A name or null here lets an override
    # replace it wholesale (Hydra merges a mapping into a mapping).
    loss: Any = None
    # A list of Keras metric names or _target_ nodes, or a mapping from output names to
    # lists. null: `accuracy` with a classification loss, else none.
    metrics: Any = None
    # One number per output (a list in output order, or by output name); null: all 1.
    loss_weights: Any = None
    # {class id: weight}, as `fit(class_weight=...)`: each example's sample weight is
    # multiplied by the weight of its class. null: none.
    class_weight: Any = None
    # true: resume a run folder's checkpoints even though model, data, optimizer, seed or
    # loss changed (kdist.runs.resume_check lists the keys; without it the run stops, status 2).
    allow_resume_changes: bool = False
    # true: train into a run folder that already holds files kdist does not write (a
    # dataset folder, say); without it such a folder is refused (status 2), untouched.
    allow_foreign_files: bool = False


# --- runtime ----------------------------------------------------------------------------


@dataclass
class RuntimeConfig:
    # Seeds Python, NumPy, TensorFlow and Keras (keras.utils.set_random_seed) and the data's shuffle
    # order: two runs with the same seed see the same batches.
    seed: int = 42
    # Turn on TensorFlow's op determinism (tf.config.experimental.enable_op_determinism): bitwise-
    # repeatable runs, at some speed cost; ops without a deterministic kernel raise.
    deterministic: bool = False
    logical_devices: int | None = None
    # Threads one op may use, and ops that may run at once; null: TensorFlow's choice
    # (every core).
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    # Let TensorFlow allocate GPU memory as needed instead of all of it at start (ignored with
    # logical_devices).
    memory_growth: bool = True
    # Keras's dtype policy: null (float32), mixed_float16 or mixed_bfloat16.
    mixed_precision: str | None = None
    # Compile each replica's forward and backward pass with XLA (not under parameter_server).
    jit_compile: bool = False
    # TensorFlow's C++ log level (TF_CPP_MIN_LOG_LEVEL): 0 all, 1 no INFO, 2 no WARNING, 3 errors
    # only.
    tf_log_level: int = 2


# --- callbacks --------------------------------------------------------------------------


@dataclass
class TensorBoardConfig:
    # Write TensorBoard event files to tensorboard/ in the run directory (chief only).
    enabled: bool = True
    # epoch, batch (every train-function call), or a number of optimizer steps; the
    # steps_per_second, examples_per_second and learning_rate scalars follow it.
    update_freq: str = "epoch"
    # [first, last]: write a TensorBoard profile (tf.profiler) of the train-function calls
    # that run optimizer steps first..last (1-based) to tensorboard/train; null: off.
    profile_steps: list[int] | None = None


@dataclass
class CSVLoggerConfig:
    # Write history.csv (one row per epoch) in the run directory (chief only).
    enabled: bool = True


@dataclass
class EarlyStoppingConfig:
    # Stop training when `monitor` stops improving (keras.callbacks.EarlyStopping).
    enabled: bool = False
    # The logged metric to watch, e.g. val_loss or val_accuracy.
    monitor: str = "val_loss"
    # Epochs without improvement before training stops.
    patience: int = 5
    # min, max, or auto (from the metric's name, as in Keras).
    mode: str = "auto"
    # Restore the weights of the best epoch when training stops.
    restore_best_weights: bool = False


@dataclass
class CheckpointConfig:
    """`callbacks.checkpoint`: periodic checkpoints in `checkpoints/`."""

    # Write checkpoints (tf.train.CheckpointManager, chief only) that a rerun in the same run
    # directory resumes from.
    enabled: bool = True
    every_n_steps: int = 0  # 0: at the end of every epoch
    # Checkpoints kept; older ones are deleted.
    keep: int = 3


@dataclass
class BackupConfig:
    """`callbacks.backup`: backup-and-restore in `backup/` (step-exact resume)."""

    # Write backups for a step-exact resume after a crash or preemption.
    enabled: bool = True
    # Back up every this many optimizer steps (and at the end of each epoch).
    every_n_steps: int = 100
    # Backups kept; older ones are deleted.
    keep: int = 2


@dataclass
class BestModelConfig:
    """`callbacks.best_model`: export `model.keras` and `saved_model/` of the best epoch."""

    monitor: str | None = None  # e.g. val_accuracy; null exports the final model
    # min, max, or auto (from the metric's name, as in Keras).
    mode: str = "auto"


@dataclass
class CallbacksConfig:
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)
    csv: CSVLoggerConfig = field(default_factory=CSVLoggerConfig)
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    backup: BackupConfig = field(default_factory=BackupConfig)
    best_model: BestModelConfig = field(default_factory=BestModelConfig)
    # Stop with exit status 3 when the training loss is NaN or infinite.
    nan_guard: bool = True
    # On SIGTERM save a backup and exit 42 (restart code of `kdist.launch --max-restarts`).
    preemption: bool = True
    # model.keras (and, with `saved_model`, saved_model/) in the run directory at the end.
    save_model: bool = True
    # With save_model: also export saved_model/ (serving_default, for TF Serving). Off by
    # default: it costs about a second at the end of a run (a fifth of the default
    # 20-epoch job, issue 29); `true` turns it on, `kdist.evaluation.export.load_model`
    # reads model.keras.
    saved_model: bool = False
    # curves.png in the run directory: loss and metrics per epoch (chief only).
    curves: bool = True
    # Extra Keras callbacks: a list of `_target_` nodes, each built inside the scope.
    extra: list[Any] = field(default_factory=list)


# --- objective and tuner (kdist.tune) -------------------------------------------------


@dataclass
class ObjectiveConfig:
    """The metric a run is judged by: the train app returns it (for Hydra sweepers)."""

    # A key of the final logs: loss, accuracy, val_loss, val_accuracy, ... auto:
    # val_accuracy when trainer.metrics has an accuracy, else val_loss (the val_ prefix
    # only with validation). direction auto: max for accuracy-like metrics, else min.
    name: str = "auto"
    direction: str = "auto"


@dataclass
class TunerObjectiveConfig:
    # The metric trials are ranked by; defaults to objective.name.
    name: str = II("objective.name")
    # min or max (auto: from the metric's name); defaults to objective.direction.
    direction: str = II("objective.direction")


@dataclass
class TunerDistributedConfig:
    """Deadlines of a distributed search (`kdist.launch --module kdist.tune`)."""

    # Seconds each oracle call may take before the worker gives up and exits.
    timeout: float = 60.0
    # Seconds a worker's first call waits for the chief's oracle to start.
    connect_timeout: float = 300.0
    # Seconds between a worker's heartbeats while it runs a trial.
    heartbeat: float = 5.0
    # Seconds of silence after which the chief counts a worker lost and fails its trial.
    worker_timeout: float = 120.0
    # Tuners the chief waits for (up to connect_timeout) before taking trials itself;
    # null: every chief and worker task of the cluster.
    tuners: int | None = None
    # Whether the chief runs trials too, besides serving the oracle.
    chief_runs_trials: bool = True
    # The run directory shared by every process; null: Hydra's output folder.
    run_dir: str | None = None


@dataclass
class TunerConfig:
    """Keys every tuner has; `_target_` builds the keras-tuner oracle."""

    _target_: str = "kdist.tuning.oracles.RandomSearchOracle"
    # Trials (hyperparameter sets) to try before the search ends.
    max_trials: int = 10
    objective: TunerObjectiveConfig = field(default_factory=TunerObjectiveConfig)
    # Config key -> sweep expression: choice(...), interval(lo, hi), tag(log, interval(...)),
    # range(start, stop, step); nested mappings are joined with dots.
    space: dict[str, Any] = field(default_factory=dict)
    # Seed of the oracle's sampling; defaults to runtime.seed.
    seed: int | None = II("runtime.seed")
    # Times a failed trial is rerun before it counts as failed.
    max_retries_per_trial: int = 0
    # The search stops after this many failed trials in a row.
    max_consecutive_failed_trials: int = 3
    # Seconds a trial may take (building its model and training); a trial over it ends as
    # FAILED with its reason and the search goes on. null: no limit.
    trial_timeout: float | None = None
    # Start afresh instead of resuming a search found in the run directory.
    overwrite: bool = False
    # 0 silent, 1 a progress bar per trial, 2 a line per epoch.
    verbose: int = 1
    distributed: TunerDistributedConfig = field(default_factory=TunerDistributedConfig)


@dataclass
class RandomTunerConfig(TunerConfig):
    pass


@dataclass
class BayesianTunerConfig(TunerConfig):
    _target_: str = "kdist.tuning.oracles.BayesianOptimizationOracle"
    # Random trials before the Gaussian process takes over; null: 3 times the number of
    # hyperparameters (keras-tuner's rule).
    num_initial_points: int | None = None
    # Noise level the Gaussian process assumes in the objective (keras-tuner's `alpha`).
    alpha: float = 1e-4
    # Exploration factor of the upper-confidence-bound acquisition (keras-tuner's `beta`): larger
    # explores more.
    beta: float = 2.6


@dataclass
class HyperbandTunerConfig(TunerConfig):
    _target_: str = "kdist.tuning.oracles.HyperbandOracle"
    # Epochs the best models of a bracket train for; defaults to trainer.epochs.
    max_epochs: int = II("trainer.epochs")
    # Reduction factor: each round keeps 1/factor of the models and trains them factor times longer.
    factor: int = 3
    # Times the whole Hyperband algorithm is repeated.
    hyperband_iterations: int = 1


# --- top level --------------------------------------------------------------------------


@dataclass
class TrainConfig:
    strategy: Any = None
    model: Any = None
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: Any = None
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    # Set by conf/tune.yaml (`python -m kdist.tune`); kdist.train ignores it.
    tuner: Any = None
    # Where outputs go when kdist runs outside a Hydra app (notebooks); the train app
    # uses Hydra's output directory.
    run_dir: str | None = None


# The schemas of each option, by group; `_GROUP_SCHEMAS` puts them in the order of
# `kdist.config.groups.GROUPS` and fails at import when a group has none.
_OPTION_SCHEMAS: dict[str, dict[str, type]] = {
    "strategy": {
        "base_auto": AutoStrategyConfig,
        "base_one_device": OneDeviceStrategyConfig,
        "base_mirrored": MirroredStrategyConfig,
        "base_multi_worker_mirrored": MultiWorkerMirroredStrategyConfig,
        "base_parameter_server": ParameterServerStrategyConfig,
    },
    "model": {
        "base_mlp": MLPConfig,
        "base_cnn": CNNConfig,
        "base_resnet": ResNetConfig,
        "base_transformer": TransformerConfig,
        "base_wide_deep": WideDeepConfig,
    },
    "data": {"base_data": DataConfig},
    "optimizer": {
        "base_adagrad": AdagradConfig,
        "base_adam": AdamConfig,
        "base_adamw": AdamWConfig,
        "base_sgd": SGDConfig,
    },
    "trainer": {"base_trainer": TrainerConfig},
    "runtime": {"base_runtime": RuntimeConfig},
    "callbacks": {"base_callbacks": CallbacksConfig},
    "tuner": {
        "base_random": RandomTunerConfig,
        "base_bayesian": BayesianTunerConfig,
        "base_hyperband": HyperbandTunerConfig,
    },
}
_GROUP_SCHEMAS = {group: _OPTION_SCHEMAS[group] for group in GROUPS}

_registered = False


def register(extra: dict[str, dict[str, type]] | None = None) -> None:
    """Store every schema in Hydra's ConfigStore (idempotent).

    Args:
        extra: more `{group: {name: dataclass}}` entries, for groups that other kdist
            modules add. Defaults to `None`.
    """
    global _registered
    cs = ConfigStore.instance()
    if not _registered:
        cs.store(name="base_train", node=TrainConfig)
        for group, options in _GROUP_SCHEMAS.items():
            for name, node in options.items():
                cs.store(group=group, name=name, node=node)
        _registered = True
    for group, options in (extra or {}).items():
        for name, node in options.items():
            cs.store(group=group, name=name, node=node)
