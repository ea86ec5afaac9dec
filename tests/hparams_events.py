"""Read TensorBoard HParams sessions back from event files (for the tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def sessions(folder: Path) -> list[dict[str, Any]]:
    """Every HParams session written in `folder`: its name, values and scalars.

    Returns:
        One dict per session: `group` (the trial or run name), `hparams` (key -> value),
        `scalars` (tag -> value, from the same folder's events) and `declared` (the
        metric tags the folder's experiment declares, in order; empty without one).
    """
    import tensorflow as tf
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    found: list[dict[str, Any]] = []
    scalars: dict[str, float] = {}
    declared: list[str] = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                plugin = value.metadata.plugin_data
                if plugin.plugin_name == metadata.PLUGIN_NAME:
                    data = plugin_data_pb2.HParamsPluginData.FromString(plugin.content)
                    if data.HasField("experiment"):
                        declared = [m.name.tag for m in data.experiment.metric_infos]
                    if data.HasField("session_start_info"):
                        info = data.session_start_info
                        values = {
                            key: getattr(v, v.WhichOneof("kind")) for key, v in info.hparams.items()
                        }
                        found.append({"group": info.group_name, "hparams": values})
                elif value.HasField("tensor"):
                    scalars[value.tag] = float(tf.make_ndarray(value.tensor))
    for session in found:
        session["scalars"] = scalars
        session["declared"] = declared
    return found
