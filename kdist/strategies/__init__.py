"""The strategy factory: `_target_` in `conf/strategy/*.yaml` names one of these."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from kdist.cluster import ClusterInfo
from kdist.config.targets import instantiate
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


def build(strategy_cfg: Any, cluster: ClusterInfo | None = None) -> Any:
    """Build the `tf.distribute.Strategy` a `strategy` config node describes.

    Args:
        strategy_cfg: the `strategy` node (with `_target_`).
        cluster: this process's cluster, resolved once for the run
            (`kdist.run_setup.RunSetup.cluster`), for a strategy over a cluster.
            Defaults to `None`: the strategy resolves it.

    Returns:
        A `tf.distribute.Strategy`.
    """
    # `sync` configures the engine (`kdist.engine.sync`), not the tf.distribute strategy.
    keys = [str(key) for key in strategy_cfg if key != "sync"]
    if isinstance(strategy_cfg, DictConfig):
        node: Any = OmegaConf.masked_copy(strategy_cfg, keys)
    else:
        node = {key: strategy_cfg[key] for key in keys}
    if cluster is not None and str(strategy_cfg.get("_target_", "")).endswith(_OVER_CLUSTERS):
        # Hydra would merge a keyword argument into the config: the value goes in the call.
        return instantiate(node, _convert_="all", _partial_=True)(resolved=cluster)
    return instantiate(node, _convert_="all")


# The strategies that take a resolved cluster (`resolved`).
_OVER_CLUSTERS = (".multi_worker_mirrored", ".parameter_server")
