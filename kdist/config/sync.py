"""`strategy.sync`: how often the replicas agree on the weights, checked before TensorFlow starts.

`every_step` (the default) all-reduces the gradients at every step. `local_sgd` and
`diloco` let each replica update its own copy of the weights and average them every
`sync_every` steps (`kdist.engine.sync`). This module holds the settings and their
checks only: it imports nothing from TensorFlow, so a bad value is refused at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kdist.config.errors import ConfigError

__all__ = ["SYNC_MODES", "SyncSettings", "check_sync", "sync_settings"]

SYNC_MODES = ("every_step", "local_sgd", "diloco")
# Strategies with one replica or no all-reduce: nothing to average.
_NO_REPLICAS = ("kdist.strategies.one_device", "kdist.strategies.parameter_server")


@dataclass(frozen=True)
class SyncSettings:
    """How the replicas of a synchronous strategy keep their weights together.

    All arguments are keyword-only and checked on construction.

    Args:
        mode: `every_step` (gradients all-reduced at every step), `local_sgd` (each
            replica applies its own gradients; the weights are averaged every
            `sync_every` steps) or `diloco` (as `local_sgd`, then an outer SGD step with
            Nesterov momentum on the averaged change). Defaults to `"every_step"`.
        sync_every: steps between two averages. Defaults to `8`.
        warmup_steps: first steps trained with `every_step` (post-local SGD). Defaults
            to `0`.
        outer_learning_rate: `diloco`'s outer learning rate. Defaults to `0.8` (the
            paper's 0.7 with momentum 0.9 ended 1.6-2.9 points below `every_step` at
            `sync_every` 16-32 on the CNN quality job, 5 seeds: docs/guides/local-sgd.md).
        outer_momentum: `diloco`'s outer Nesterov momentum. Defaults to `0.6`.
        overlap_steps: steps an average's all-reduce runs beside the local steps before
            its result is applied (each replica keeps what it learnt meanwhile, as
            Streaming DiLoCo's overlapped communication does); `0` averages at once.
            Below `sync_every`. Defaults to `0`.

    Raises:
        ConfigError: naming the `strategy.sync.*` key of a bad value.
    """

    mode: str = "every_step"
    sync_every: int = 8
    warmup_steps: int = 0
    outer_learning_rate: float = 0.8
    outer_momentum: float = 0.6
    overlap_steps: int = 0

    def __post_init__(self) -> None:
        if self.mode not in SYNC_MODES:
            raise ConfigError(
                "strategy.sync.mode", "is not a sync mode", value=self.mode,
                hint=f"choose one of {', '.join(SYNC_MODES)}",
            )  # fmt: skip
        if not _is_int(self.sync_every) or self.sync_every < 1:
            raise ConfigError(
                "strategy.sync.sync_every",
                "must be a positive integer (steps between two weight averages)",
                value=self.sync_every,
                hint="try 8",
            )
        if not _is_int(self.warmup_steps) or self.warmup_steps < 0:
            raise ConfigError(
                "strategy.sync.warmup_steps", "must be an integer >= 0", value=self.warmup_steps
            )
        overlap = self.overlap_steps
        if not _is_int(overlap) or not 0 <= overlap < self.sync_every:
            raise ConfigError(
                "strategy.sync.overlap_steps",
                f"must be an integer >= 0 and below strategy.sync.sync_every ({self.sync_every}): "
                "an average's result is applied before the next one starts",
                value=overlap,
                hint="try 1 or 2 (0 averages at once)",
            )
        lr = self.outer_learning_rate
        if not _is_number(lr) or not 0 < lr < math.inf:
            raise ConfigError(
                "strategy.sync.outer_learning_rate", "must be a finite number > 0", value=lr,
                hint="the DiLoCo paper uses 0.7",
            )  # fmt: skip
        momentum = self.outer_momentum
        if not _is_number(momentum) or not 0 <= momentum < 1:
            raise ConfigError(
                "strategy.sync.outer_momentum", "must be a number >= 0 and < 1", value=momentum,
                hint="the DiLoCo paper uses 0.9",
            )  # fmt: skip

    @property
    def local(self) -> bool:
        """Whether replicas train apart between averages (`local_sgd` or `diloco`)."""
        return self.mode != "every_step"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def sync_settings(strategy_cfg: Any) -> SyncSettings:
    """The `SyncSettings` of a `strategy` config node (`every_step` when it has none)."""
    node = strategy_cfg.get("sync") if strategy_cfg is not None else None
    if node is None:
        return SyncSettings()
    return SyncSettings(**{str(k): v for k, v in dict(node).items()})


def check_sync(cfg: Any) -> None:
    """Refuse a bad `strategy.sync` node, and local modes where there is nothing to average.

    Raises:
        ConfigError: naming the key.
    """
    settings = sync_settings(cfg.strategy)
    if not settings.local:
        return
    target = str(cfg.strategy.get("_target_"))
    if target in _NO_REPLICAS:
        raise ConfigError(
            "strategy.sync.mode",
            f"averages the replicas' weights, and strategy {target.rsplit('.', 1)[-1]} "
            "has no replicas to average",
            value=settings.mode,
            hint="use strategy=mirrored or multi_worker_mirrored, or strategy.sync.mode=every_step",
        )
