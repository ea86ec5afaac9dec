"""The strategy factory: `_target_` in `conf/strategy/*.yaml` names one of these."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from kdist.config.build import instantiate
from kdist.strategies.multi_worker import multi_worker_mirrored
from kdist.strategies.parameter_server import parameter_server
from kdist.strategies.single_host import auto, mirrored, one_device

__all__ = [
    "auto",
    "build",
    "mirrored",
    "multi_worker_mirrored",
    "one_device",
    "parameter_server",
]


def build(strategy_cfg: Any) -> Any:
    """Build the `tf.distribute.Strategy` a `strategy` config node describes.

    Args:
        strategy_cfg: the `strategy` node (with `_target_`).

    Returns:
        A `tf.distribute.Strategy`.
    """
    # `sync` configures the engine (`kdist.engine.sync`), not the tf.distribute strategy.
    keys = [str(key) for key in strategy_cfg if key != "sync"]
    if isinstance(strategy_cfg, DictConfig):
        return instantiate(OmegaConf.masked_copy(strategy_cfg, keys), _convert_="all")
    return instantiate({key: strategy_cfg[key] for key in keys}, _convert_="all")
