"""A run's setup, made once: the config validated, the cluster found, the resume decided.

`setup_run` validates a composed config, resolves its objective and finds this process's
cluster; `RunSetup.checked_in` adds the run folder's resume decision (its checkpoints
checked against the config, `kdist.runs.resume_check`). The frozen `RunSetup` is handed
on: `kdist train` makes it before Hydra starts the job (`kdist.train.precheck`) and hands
it to the job (`hand_over`, `take_over`); `kdist.Experiment` takes it (or makes its own
in a notebook). Nothing downstream validates, resolves the cluster or checks the resume
again; `tests/test_setup_once.py` counts each per run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from kdist.cluster import ClusterInfo
from kdist.cluster import resolve as resolve_cluster
from kdist.config.errors import ConfigError
from kdist.config.objective import resolve_objective
from kdist.config.validate import validate
from kdist.runs import lock as run_lock
from kdist.runs import resume_check
from kdist.runs.layout import foreign_entries, linked_entries
from kdist.runs.sweep import TrainJob

__all__ = [
    "FOREIGN_KEY",
    "Resume",
    "RunSetup",
    "accept_run_dir",
    "cluster_of",
    "hand_over",
    "known_cluster",
    "setup_run",
    "take_over",
    "take_run_dir",
]

FOREIGN_KEY = "trainer.allow_foreign_files"

# `kdist.cluster.resolve`'s defaults, which a config without those keys gets.
_AUTO, _PORT_BASE = "auto", 8888


@dataclasses.dataclass(frozen=True)
class Resume:
    """What a run folder's checkpoints decided for a config (`resume_check.check_resume`).

    Attributes:
        run_dir: the folder checked.
        changed: the changed keys `trainer.allow_resume_changes` accepted, to apply after
            the restore (`resume_check.apply_allowed_changes`); empty when none.
    """

    run_dir: Path
    changed: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """One run's setup, made once and handed on.

    Attributes:
        cfg: the composed config, validated, its `objective` resolved.
        cluster: this process's cluster (`kdist.cluster.resolve` with the config's
            `strategy.cluster` and `strategy.port_base`).
        objective_auto: `objective.name` was `auto` before it was resolved.
        direction_auto: `objective.direction` was `auto` before it was resolved.
        resume: the run folder's resume decision (`checked_in`); `None` before it.
        job: the `kdist.train` job Hydra runs (its overrides, its place in a sweep:
            `kdist.runs.sweep.train_job`); `None` in a notebook or a tuner trial.
    """

    cfg: DictConfig
    cluster: ClusterInfo
    objective_auto: bool = False
    direction_auto: bool = False
    resume: Resume | None = None
    job: TrainJob | None = None

    def checked_in(self, run_dir: str | Path, recorded: Any = None) -> RunSetup:
        """This setup with `run_dir`'s resume decision (the folder's lock held, chief).

        Args:
            run_dir: the run folder.
            recorded: the config as the folder records this run (a notebook's `fit`
                arguments over `cfg`: `kdist.experiment.run_data.DataPlan.recorded`).
                Defaults to `None`: `cfg`.

        Raises:
            ConfigError: naming the changed keys when the folder's checkpoints were
                trained with other settings (`kdist.runs.resume_check.check_resume`).
        """
        changed = resume_check.check_resume(run_dir, self.cfg if recorded is None else recorded)
        return dataclasses.replace(self, resume=Resume(Path(run_dir), tuple(changed)))

    def resumed_in(self, run_dir: str | Path) -> bool:
        """Whether the resume decision was made for `run_dir`."""
        return self.resume is not None and _same(self.resume.run_dir, Path(run_dir))


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def cluster_of(cfg: Any, known: ClusterInfo | None = None) -> ClusterInfo:
    """This process's cluster as the config's strategy finds it.

    Args:
        cfg: the composed config.
        known: a cluster already resolved with `resolve`'s defaults (the command line
            resolves one before it composes): used when the config asks for the same.
    """
    strategy = cfg.get("strategy") or {}
    mode = str(strategy.get("cluster", _AUTO))
    port_base = int(strategy.get("port_base", _PORT_BASE))
    if known is not None and mode == _AUTO and port_base == _PORT_BASE:
        return known
    return resolve_cluster(mode=mode, port_base=port_base)


def setup_run(cfg: DictConfig, *, cluster: ClusterInfo | None = None) -> RunSetup:
    """Validate `cfg`, resolve its objective (in place) and find the cluster, once.

    Args:
        cfg: a composed train config.
        cluster: this process's cluster resolved with `resolve`'s defaults, if known.

    Raises:
        ConfigError: naming the key at fault.
    """
    objective = cfg.get("objective")
    objective_auto = objective is not None and objective.get("name") == "auto"
    direction_auto = objective is not None and objective.get("direction") == "auto"
    validate(cfg)
    resolve_objective(cfg)  # the run's config names what `auto` became
    return RunSetup(
        cfg,
        cluster_of(cfg, cluster),
        objective_auto=objective_auto,
        direction_auto=direction_auto,
    )


def accept_run_dir(run_dir: str | Path, cfg: DictConfig) -> None:
    """Refuse a run folder before anything in it changes; reads only.

    In this order: another run holds its lock (`kdist.runs.lock.check_free`); a name kdist
    writes there is a symbolic link (`kdist.runs.layout.linked_entries`); it holds files
    kdist does not write (`kdist.runs.layout.foreign_entries`, unless
    `trainer.allow_foreign_files=true`). Then `take_run_dir` holds the lock and checks the
    folder's checkpoints against the config (`kdist.runs.resume_check`). The run's
    `.hydra/` and the config beside the checkpoints are written only once all of these
    have passed.

    Args:
        run_dir: the run folder (it may not exist yet).
        cfg: the run's composed config.

    Raises:
        ConfigError: naming `hydra.run.dir` (or the key at fault) and what to do.
    """
    run_lock.check_free(run_dir)
    links = linked_entries(run_dir)
    if links:
        raise ConfigError(
            "hydra.run.dir",
            f"holds symbolic links where kdist writes ({', '.join(links[:5])}); kdist "
            "does not write through links",
            value=str(run_dir),
            hint="remove them, or choose another hydra.run.dir",
        )
    foreign = foreign_entries(run_dir)
    if foreign and not OmegaConf.select(cfg, FOREIGN_KEY, default=False):
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise ConfigError(
            "hydra.run.dir",
            f"already holds files kdist does not write ({shown}); a run would mix its "
            "outputs into them",
            value=str(run_dir),
            hint=f"choose a new or empty folder, or {FOREIGN_KEY}=true",
        )


def take_run_dir(run_dir: str | Path, setup: RunSetup, held: contextlib.ExitStack) -> RunSetup:
    """Hold `run_dir`'s lock until `held` closes, and decide its resume under it (once).

    Returns:
        `setup` with the folder's resume decision (`RunSetup.checked_in`).

    Raises:
        ConfigError: when another process holds the folder, or its checkpoints were trained
            with other settings; a lock file this call made is removed again then.
    """
    lock_file = Path(run_dir) / run_lock.LOCK_NAME
    existed = lock_file.exists() or lock_file.is_symlink()
    # What a run that ended without releasing it (a killed one) left in the lock file.
    found = lock_file.read_bytes() if existed and lock_file.is_file() else None
    with contextlib.ExitStack() as mine:
        mine.enter_context(run_lock.hold(run_dir))
        try:
            checked = setup.checked_in(run_dir)
        except ConfigError:
            mine.close()
            # A refused run leaves the folder as it found it, byte for byte: no lock file
            # it made, and a dead owner's pid where it was (unless another run took it).
            if not existed:
                lock_file.unlink(missing_ok=True)
            elif found and lock_file.is_file() and not lock_file.read_bytes():
                lock_file.write_bytes(found)
            raise
        held.enter_context(mine.pop_all())
    return checked


# What `kdist train` found before Hydra started its jobs: the cluster (every job's) and
# the setup of a single run (that job's).
_HANDED: dict[str, Any] = {}


def hand_over(setup: RunSetup | None = None, *, cluster: ClusterInfo | None = None) -> None:
    """Keep, for the Hydra jobs this process starts next, a single run's `setup` (its one
    job takes it, `take_over`) or the `cluster` a sweep's jobs share (`known_cluster`)."""
    _HANDED.clear()
    _HANDED.update(setup=setup, cluster=setup.cluster if setup is not None else cluster)


def take_over() -> RunSetup | None:
    """The setup handed over for this job (once), or `None` (a sweep's job makes its own)."""
    setup: RunSetup | None = _HANDED.pop("setup", None)
    return setup


def known_cluster() -> ClusterInfo | None:
    """This process's cluster as `kdist train` resolved it before its jobs, if it did."""
    cluster: ClusterInfo | None = _HANDED.get("cluster")
    return cluster
