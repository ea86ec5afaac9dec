"""`kdist train --help` and `kdist tune --help` print what Hydra's own help path prints,
without listing the config groups the template does not show (`kdist.config.fast_help`).

Cost: ~15 s (8 help commands in subprocesses, 4 of them on Hydra's slow path).
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import REPO

from kdist.config import fast_help

# A command's help in a fresh process, with `fast_help.install` as kdist has it or as a
# no-op (Hydra's own `get_help`, every group listed twice, as before the patch).
_SCRIPT = """
import sys
import kdist.config.fast_help as fast_help
if sys.argv[1] == "hydra":
    fast_help.install = lambda: None
sys.argv = ["kdist", *sys.argv[2:]]
from kdist.command import main
main()
"""


def _help(path: str, *args: str) -> bytes:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, path, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("train", "--help"),
        ("train", "model=cnn", "strategy=mirrored", "--help"),
        ("tune", "tuner=bayesian", "--help"),
        ("train", "--hydra-help"),
    ],
)
def test_help_is_byte_identical_to_hydras(args: tuple[str, ...]):
    fast = _help("kdist", *args)
    assert fast == _help("hydra", *args)
    assert b"== Config groups" in fast or b"Hydra (" in fast  # a help, not an empty line


class _Hydra:
    """What `get_help` calls on Hydra's object, counted."""

    def __init__(self) -> None:
        self.listed = 0

    def format_args_help(self, parser: object) -> str:
        return "FLAGS"

    def format_config_groups(self, predicate, compact: bool = True) -> str:
        self.listed += 1
        return ",".join(g for g in ("hydra/launcher", "model") if predicate(g))


def _get_help(template: str) -> tuple[str, int]:
    hydra = _Hydra()
    cfg = SimpleNamespace(template=template)
    from omegaconf import OmegaConf

    text = fast_help.lazy_get_help(hydra, cfg, OmegaConf.create({"a": 1}), None, False)
    return text, hydra.listed


def test_a_listing_is_made_only_when_the_template_names_it():
    assert _get_help("only $FLAGS_HELP") == ("only FLAGS", 0)
    assert _get_help("$APP_CONFIG_GROUPS|$HYDRA_CONFIG_GROUPS") == ("model|hydra/launcher", 2)
    assert _get_help("$APP_CONFIG_GROUPS $APP_CONFIG_GROUPS") == ("model model", 1)
    assert _get_help("$CONFIG") == ("a: 1\n", 0)
    with pytest.raises(KeyError):  # as Hydra's: an unknown placeholder is an error
        _get_help("$NOT_A_PLACEHOLDER")


def test_installed_by_the_help_resolver():
    from hydra._internal.hydra import Hydra

    from kdist.config.groups import register_help_resolver

    original = Hydra.get_help
    try:
        register_help_resolver()
        assert fast_help.installed()
    finally:
        Hydra.get_help = original  # type: ignore[method-assign]


def test_the_replaced_method_is_still_hydras():
    """`install` replaces `Hydra.get_help` by assignment: had an upgrade renamed it (or its
    parameters, or `app_help` no longer called it), kdist's would be called by nothing and
    the help above would still equal Hydra's. Read in a fresh process, before kdist
    replaces it."""
    import inspect

    script = (
        "import inspect\n"
        "from hydra._internal.hydra import Hydra\n"
        "print(','.join(inspect.signature(Hydra.get_help).parameters))\n"
        "print('self.get_help(' in inspect.getsource(Hydra.app_help))\n"
        "print('self.get_help(' in inspect.getsource(Hydra.hydra_help))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    parameters, in_app_help, in_hydra_help = done.stdout.split()
    assert parameters == ",".join(inspect.signature(fast_help.lazy_get_help).parameters)
    assert in_app_help == in_hydra_help == "True"
