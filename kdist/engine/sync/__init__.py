"""Local SGD and DiLoCo: replicas that train apart and average their weights (`strategy.sync`)."""

from kdist.engine.sync.averaging import SyncCount, WeightAverager
from kdist.engine.sync.local_updates import install_local_updates
from kdist.engine.sync.replica_state import ReplicaStates
from kdist.engine.sync.runner import LocalSGDRunner

__all__ = [
    "LocalSGDRunner",
    "ReplicaStates",
    "SyncCount",
    "WeightAverager",
    "install_local_updates",
]
