"""Count the cross-replica operations a traced `tf.function` holds (tests of issue 53)."""

from __future__ import annotations

from collections import Counter
from typing import Any

# Ops that communicate across workers under MultiWorkerMirroredStrategy (and NCCL/ring
# all-reduces under MirroredStrategy).
COLLECTIVE_OPS = frozenset(
    {
        "CollectiveReduce",
        "CollectiveReduceV2",
        "CollectiveReduceV3",
        "CollectiveGather",
        "CollectiveGatherV2",
        "CollectiveBcastSend",
        "CollectiveBcastRecv",
        "CollectiveBcastSendV2",
        "CollectiveBcastRecvV2",
        "CollectiveAllToAllV2",
        "CollectiveAllToAllV3",
        "NcclAllReduce",
        "NcclReduce",
        "NcclBroadcast",
    }
)


def collective_ops(function: Any) -> Counter[str]:
    """The collective ops of a concrete function's graph, nested function bodies included."""
    graph_def = function.graph.as_graph_def()
    nodes = list(graph_def.node)
    for body in graph_def.library.function:
        nodes.extend(body.node_def)
    return Counter(node.op for node in nodes if node.op in COLLECTIVE_OPS)


def traced_functions(function: Any) -> list[Any]:
    """The concrete functions a `tf.function` has traced so far."""
    return list(function._list_all_concrete_functions_for_serialization())
