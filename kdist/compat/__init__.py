"""Every private name of Keras and TensorFlow that kdist uses, in one place.

kdist needs a few names that Keras 3 and TensorFlow do not make public (see
`kdist.compat.upstream.PRIVATE_NAMES` for each one and why). They are reached only
through this package: `kdist.compat.keras_private` and `kdist.compat.tf_private`. When an
upgrade moves one, the call raises `UpstreamMoved` naming the upstream symbol and the
kdist function that needs it, and `tests/test_compat.py` fails the same way.
"""

from kdist.compat.upstream import PRIVATE_NAMES, TESTED_WITH, PrivateName, UpstreamMoved

__all__ = ["PRIVATE_NAMES", "TESTED_WITH", "PrivateName", "UpstreamMoved"]
