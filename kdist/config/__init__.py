"""Config composition, schemas and validation.

The functions `compose` and `validate` live in `kdist.config.compose` and
`kdist.config.validate` (the top-level `kdist.compose` is the one users call).
"""

from kdist.config.errors import EXIT_CONFIG_ERROR, ConfigError, exit_with
from kdist.config.schema import register
from kdist.config.targets import instantiate

__all__ = [
    "EXIT_CONFIG_ERROR",
    "ConfigError",
    "exit_with",
    "instantiate",
    "register",
]
