"""Typed schemas behind the YAML in `conf/`.

One dataclass per config group (and per option where the options' keys differ), stored
in Hydra's ConfigStore as `base_<option>` in the group. Each YAML option starts with
`defaults: [base_<option>, _self_]`, so a wrong type or an unknown key fails while Hydra
composes the config, naming the key, before TensorFlow is imported.

Nodes that point at a callable with `_target_` whose keyword arguments are open-ended
(the data source, a user's model) are typed `Any` here; `kdist.config.validate` checks
their keys against the callable's signature instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

__all__ = [
    "AdamConfig",
    "AdamWConfig",
    "AutoStrategyConfig",
    "CNNConfig",
    "CallbacksConfig",
    "DataConfig",
    "MLPConfig",
    "MirroredStrategyConfig",
    "MultiWorkerMirroredStrategyConfig",
    "OneDeviceStrategyConfig",
    "OptimizerConfig",
    "RuntimeConfig",
    "SGDConfig",
    "TrainConfig",
    "TrainerConfig",
    "register",
]


# --- strategy ---------------------------------------------------------------------------


@dataclass
class AutoStrategyConfig:
    _target_: str = "kdist.strategies.auto"


@dataclass
class OneDeviceStrategyConfig:
    _target_: str = "kdist.strategies.one_device"
    device: str | None = None


@dataclass
class MirroredStrategyConfig:
    _target_: str = "kdist.strategies.mirrored"
    devices: list[str] | None = None
    cross_device_ops: str = "auto"


@dataclass
class MultiWorkerMirroredStrategyConfig:
    _target_: str = "kdist.strategies.multi_worker_mirrored"
    communication: str = "auto"
    timeout_seconds: float | None = None
    cluster: str = "auto"
    port_base: int = 8888


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


# --- data -------------------------------------------------------------------------------


@dataclass
class DataConfig:
    # `_target_` node building a `kdist.data.Source`; its keys are checked against the
    # callable's signature by `kdist.config.validate`.
    source: Any = None
    shuffle: bool = True
    shuffle_buffer: int = 10_000
    cache: bool = True
    shard_policy: str = "auto"


# --- optimizer --------------------------------------------------------------------------


@dataclass
class OptimizerConfig:
    """Keys common to every optimizer; kdist's own keys are removed before Keras sees them."""

    _target_: str = "keras.optimizers.Adam"
    _partial_: bool = True
    learning_rate: float = 1e-3
    # kdist: scale `learning_rate` with the replica count: none, linear or sqrt.
    lr_scaling: str = "none"
    clipnorm: float | None = None


@dataclass
class AdamConfig(OptimizerConfig):
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7


@dataclass
class AdamWConfig(AdamConfig):
    _target_: str = "keras.optimizers.AdamW"
    weight_decay: float = 0.004


@dataclass
class SGDConfig(OptimizerConfig):
    _target_: str = "keras.optimizers.SGD"
    learning_rate: float = 0.01
    momentum: float = 0.0
    nesterov: bool = False


# --- trainer ----------------------------------------------------------------------------


@dataclass
class TrainerConfig:
    epochs: int = 10
    steps_per_epoch: int | None = None
    global_batch_size: int = 64
    steps_per_execution: int = 1
    validation_freq: int = 1
    validation: bool = True
    verbose: int = 1
    loss: Any = field(
        default_factory=lambda: {
            "_target_": "keras.losses.SparseCategoricalCrossentropy",
            "from_logits": True,
        }
    )
    metrics: Any = field(
        default_factory=lambda: [
            {"_target_": "keras.metrics.SparseCategoricalAccuracy", "name": "accuracy"}
        ]
    )


# --- runtime ----------------------------------------------------------------------------


@dataclass
class RuntimeConfig:
    seed: int = 42
    deterministic: bool = False
    logical_devices: int | None = None
    memory_growth: bool = True
    mixed_precision: str | None = None
    jit_compile: bool = False
    tf_log_level: int = 2


# --- callbacks --------------------------------------------------------------------------


@dataclass
class TensorBoardConfig:
    enabled: bool = True
    update_freq: str = "epoch"


@dataclass
class CSVLoggerConfig:
    enabled: bool = True


@dataclass
class EarlyStoppingConfig:
    enabled: bool = False
    monitor: str = "val_loss"
    patience: int = 5
    mode: str = "auto"
    restore_best_weights: bool = False


@dataclass
class CallbacksConfig:
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)
    csv: CSVLoggerConfig = field(default_factory=CSVLoggerConfig)
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    save_model: bool = True
    # curves.png in the run directory: loss and metrics per epoch (chief only).
    curves: bool = True
    # Extra Keras callbacks: a list of `_target_` nodes, each built inside the scope.
    extra: list[Any] = field(default_factory=list)


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
    # Where outputs go when kdist runs outside a Hydra app (notebooks); the train app
    # uses Hydra's output directory.
    run_dir: str | None = None


_GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "strategy": {
        "base_auto": AutoStrategyConfig,
        "base_one_device": OneDeviceStrategyConfig,
        "base_mirrored": MirroredStrategyConfig,
        "base_multi_worker_mirrored": MultiWorkerMirroredStrategyConfig,
    },
    "model": {"base_mlp": MLPConfig, "base_cnn": CNNConfig},
    "data": {"base_data": DataConfig},
    "optimizer": {"base_adam": AdamConfig, "base_adamw": AdamWConfig, "base_sgd": SGDConfig},
    "trainer": {"base_trainer": TrainerConfig},
    "runtime": {"base_runtime": RuntimeConfig},
    "callbacks": {"base_callbacks": CallbacksConfig},
}

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
