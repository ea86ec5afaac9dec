"""Names that the config checks and the code they configure share.

Models, data and optimizers import these, and `kdist.config.validate` checks configs
against them; this module imports nothing (no TensorFlow, no Hydra), so importing a
model does not import the config checks.
"""

from __future__ import annotations

__all__ = [
    "ALLREDUCE_DTYPES",
    "FLIP_MODES",
    "HYDRA_KEYS",
    "LAZY_OPTIMIZERS",
    "LOCAL_CLUSTER_ENV",
    "LR_SCHEDULES",
    "MODEL_INJECTED_KEYS",
    "OPTIMIZER_KDIST_KEYS",
    "RESNET_VARIANTS",
]

# Keys Hydra's `instantiate` consumes itself.
HYDRA_KEYS = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})
# Keys of the optimizer node that kdist consumes before building the Keras optimizer.
OPTIMIZER_KDIST_KEYS = (
    "lr_scaling",
    "schedule",
    "warmup_steps",
    "decay_steps",
    "alpha",
    "sparse_updates",
)
# `optimizer._target_` -> its row-sparse form (`optimizer.sparse_updates=true`,
# kdist.modeling.lazy_optimizers); an optimizer missing here has none.
LAZY_OPTIMIZERS = {
    "keras.optimizers.Adam": "kdist.modeling.lazy_optimizers.LazyAdam",
    "keras.optimizers.Adagrad": "kdist.modeling.lazy_optimizers.LazyAdagrad",
    "kdist.modeling.lazy_optimizers.LazyAdam": "kdist.modeling.lazy_optimizers.LazyAdam",
    "kdist.modeling.lazy_optimizers.LazyAdagrad": "kdist.modeling.lazy_optimizers.LazyAdagrad",
}
LR_SCHEDULES = (None, "cosine")
# Set by `kdist.launch` on the tasks of a local cluster: "<workers>,<ps>"
# (`kdist.cluster.ClusterInfo.launched`; kdist.callbacks.progress.ClusterSpeed prints what
# one process must beat).
LOCAL_CLUSTER_ENV = "KDIST_LOCAL_CLUSTER"
# `trainer.allreduce_dtype`: the type gradients are summed across replicas in.
ALLREDUCE_DTYPES = ("float32", "bfloat16", "float16")
RESNET_VARIANTS = ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet50")
FLIP_MODES = (None, "horizontal", "vertical", "horizontal_and_vertical")
# Arguments kdist gives a model callable from the data.
MODEL_INJECTED_KEYS = ("input_shape", "num_classes")
