"""Every private name of Keras, TensorFlow, keras-tuner and Hydra kdist uses, in one place.

kdist needs a few names that its libraries do not make public (see
`kdist.compat.upstream.PRIVATE_NAMES` for each one and why). They are reached only
through this package: `kdist.compat.keras_private`, `kdist.compat.tf_private` and
`kdist.compat.tools_private` (keras-tuner, OmegaConf, Hydra). `kdist.compat.moved` keeps
the module paths that moved in kdist 0.10 importing. When an
upgrade moves one, the call raises `UpstreamMoved` naming the upstream symbol and the
kdist function that needs it, and `tests/test_compat.py` fails the same way.
"""

from kdist.compat.upstream import (
    OVERRIDDEN_HOOKS,
    PRIVATE_NAMES,
    TESTED_WITH,
    PrivateName,
    UpstreamMoved,
)

__all__ = ["OVERRIDDEN_HOOKS", "PRIVATE_NAMES", "TESTED_WITH", "PrivateName", "UpstreamMoved"]
