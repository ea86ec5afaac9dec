"""A sweep's TensorBoard: each job named by what it sweeps (`optimizer.learning_rate=0.003`).

TensorBoard names a run by its folder below `--logdir`: pointed at a sweep folder, every
job is `0/tensorboard/train`, `1/tensorboard/train`, ... with nothing of its values. As
TensorBoard's README advises for naming runs ("prefer using a symlink tree"), each job
with TensorBoard on links its `tensorboard/` folder into the sweep's own:

    multirun/2026-11-26/10-00-00/tensorboard/optimizer.learning_rate=0.003 -> ../1/tensorboard

so that `tensorboard --logdir multirun/2026-11-26/10-00-00/tensorboard` shows the runs
`optimizer.learning_rate=0.003/train`, `.../validation` and the HParams session
`optimizer.learning_rate=0.003`. A job's label is its swept keys with their values, in
the form of Hydra's `override_dirname` (keys sorted, `key=value` joined by `,`); the keys
the command gave one value (`trainer=fast_dev`) are the same in every job and left out.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from kdist.config.yaml_limits import load_yaml
from kdist.runs.layout import TENSORBOARD

__all__ = ["MULTIRUN_FILE", "job_label", "link_job_board", "sweep_board", "swept_keys"]

log = logging.getLogger(__name__)

# What Hydra writes in a sweep folder before any job starts: the command's overrides.
MULTIRUN_FILE = "multirun.yaml"
_MAX_LABEL = 200  # bytes of a file name, with room for a job number


def sweep_board(sweep_dir: str | Path) -> Path:
    """The sweep's TensorBoard folder (`<sweep>/tensorboard`): the `--logdir` to open."""
    return Path(sweep_dir) / TENSORBOARD


def _sweeps(texts: Iterable[str]) -> set[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = set()
    for text in texts:
        try:
            (override,) = OverridesParser.create().parse_overrides([text])
        except Exception:  # not Hydra's grammar: no sweep to name
            continue
        if override.is_sweep_override():
            keys.add(override.key_or_group.lstrip("+"))
    return keys


def swept_keys(sweep_dir: str | Path) -> set[str] | None:
    """The keys the sweep varies: its command's sweeps and `hydra.sweeper.params`.

    Args:
        sweep_dir: the sweep folder (holding Hydra's `multirun.yaml`).

    Returns:
        The keys, or `None` when the sweep folder has no readable `multirun.yaml`.
    """
    try:
        saved = load_yaml(Path(sweep_dir) / MULTIRUN_FILE, key="hydra.sweep.dir") or {}
        hydra_cfg = saved.get("hydra") or {}
        task = [str(o) for o in (hydra_cfg.get("overrides") or {}).get("task") or []]
        params = (hydra_cfg.get("sweeper") or {}).get("params") or {}
    except Exception:  # no multirun.yaml (yet), or not the mapping Hydra writes
        return None
    if not isinstance(params, Mapping):
        params = {}
    return _sweeps([*task, *(f"{key}={value}" for key, value in params.items())])


def job_label(overrides: Sequence[str], *, swept: set[str] | None, num: int) -> str:
    """A job's name by what differs between the sweep's jobs, e.g. `model=cnn,optimizer.lr=0.1`.

    Args:
        overrides: the job's own overrides (`hydra.overrides.task`).
        swept: the keys the sweep varies (`swept_keys`); `None`: every override counts.
        num: the job's number, the name when nothing is swept (`job_0`).

    Returns:
        A name fit for one folder: `/` replaced by `_`, at most 200 bytes.
    """
    pairs = []
    for text in overrides:
        key, sep, value = str(text).partition("=")
        key = key.lstrip("+")
        if not sep or key.startswith(("~", "hydra.", "hydra/")):
            continue
        if swept is None or key in swept:
            pairs.append((key, value))
    label = ",".join(f"{key}={value}" for key, value in sorted(pairs)) or f"job_{num}"
    label = label.replace(os.sep, "_").replace("\0", "")
    if label in (".", ".."):
        label = f"job_{num}"
    if len(label.encode()) > _MAX_LABEL:
        label = label.encode()[:_MAX_LABEL].decode(errors="ignore") + f"..._{num}"
    return label


def link_job_board(sweep_dir: str | Path, run_dir: str | Path, label: str) -> Path | None:
    """Link the job's `tensorboard/` into the sweep's board as `label` (see the module).

    The link is relative (the sweep folder may move) and made once; a name another job took
    (the same values swept twice) gets the job folder's name added. Nothing is written
    through a link: a sweep board that is itself a link is left alone.

    Args:
        sweep_dir: the sweep folder.
        run_dir: the job's folder, inside `sweep_dir`.
        label: the job's name (`job_label`).

    Returns:
        The link, or `None` when it could not be made (logged: a name is a convenience).
    """
    board = sweep_board(sweep_dir)
    run = Path(run_dir)
    try:
        target = Path(os.path.relpath(run.resolve() / TENSORBOARD, board.resolve()))
        if board.is_symlink():
            raise OSError(f"{board} is a symbolic link")
        board.mkdir(parents=True, exist_ok=True)
        for name in (label, f"{label} ({run.name})"):
            link = board / name
            if link.is_symlink() and Path(os.readlink(link)) == target:
                return link
            if not os.path.lexists(link):
                os.symlink(target, link, target_is_directory=True)
                return link
        raise OSError(f"{board / label} is taken")
    except (OSError, ValueError) as error:
        log.info("no name for job %s in %s: %s", run.name, board, error)
        return None
