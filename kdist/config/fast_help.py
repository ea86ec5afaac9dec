"""`kdist train --help` without the listing its template does not print.

Hydra's `Hydra.get_help` fills the help template with `string.Template.substitute`, and
computes every placeholder first: `$APP_CONFIG_GROUPS` and `$HYDRA_CONFIG_GROUPS` list
every config group of the config repository, and each listing deep-copies the repository's
loaded configs again and again (Hydra issue #2907): ~80 % of a 1.5-2 s `--help`. kdist's
templates (conf/train.yaml, conf/tune.yaml) print neither; their groups come from
`${kdist.help_groups:...}` (`kdist.config.groups.groups_help`). `install` makes Hydra
compute a placeholder only when the template names it, so the text is byte for byte what
Hydra prints (a template that names `$APP_CONFIG_GROUPS` gets Hydra's own listing, from
the config repository, as before), and `--help` costs what composing the config costs.
`--hydra-help` (whose template prints both listings) is unchanged.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kdist.compat.tools_private import hydra_class

__all__ = ["install", "installed", "lazy_get_help"]


class _Lazy(Mapping[str, str]):
    """A mapping that computes a value the first time `string.Template` asks for it."""

    def __init__(self, makers: dict[str, Callable[[], str]]):
        self._makers = makers
        self._made: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        if name not in self._made:
            self._made[name] = self._makers[name]()  # KeyError as a dict's, for substitute
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


def lazy_get_help(self: Any, help_cfg: Any, cfg: Any, args_parser: Any, resolve: bool) -> str:
    """Hydra's `Hydra.get_help` (Hydra 1.3), each placeholder made on demand.

    The same four placeholders, made by the same calls, as Hydra's own method.
    """
    from omegaconf import OmegaConf

    def is_hydra_group(x: str) -> bool:
        return x.startswith("hydra/") or x == "hydra"

    def is_not_hydra_group(x: str) -> bool:
        return not is_hydra_group(x)

    values = _Lazy(
        {
            "FLAGS_HELP": lambda: self.format_args_help(args_parser),
            "HYDRA_CONFIG_GROUPS": lambda: self.format_config_groups(is_hydra_group),
            "APP_CONFIG_GROUPS": lambda: self.format_config_groups(is_not_hydra_group),
            "CONFIG": lambda: OmegaConf.to_yaml(cfg, resolve=resolve),
        }
    )
    return string.Template(help_cfg.template).substitute(values)


def installed() -> bool:
    """Whether Hydra's `get_help` is `lazy_get_help` in this process."""
    return hydra_class().get_help is lazy_get_help  # type: ignore[attr-defined]


def install() -> None:
    """Make Hydra's `get_help` compute only the placeholders a template names (idempotent).

    Called where kdist registers its help resolver (`kdist.config.groups`), before any
    command's `--help`.
    """
    hydra_class().get_help = lazy_get_help  # type: ignore[attr-defined]  # see the module docstring
