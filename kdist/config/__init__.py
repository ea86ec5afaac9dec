"""Config composition, schemas and validation."""

from kdist.config.build import instantiate
from kdist.config.compose import compose, format_hydra_error
from kdist.config.errors import EXIT_CONFIG_ERROR, ConfigError, exit_with
from kdist.config.schema import register
from kdist.config.validate import check_target_keys, validate

__all__ = [
    "EXIT_CONFIG_ERROR",
    "ConfigError",
    "check_target_keys",
    "compose",
    "exit_with",
    "format_hydra_error",
    "instantiate",
    "register",
    "validate",
]
