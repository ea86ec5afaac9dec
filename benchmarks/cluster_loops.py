"""Suite `cluster_loops`: kdist's local clusters against hand-written ones (spot check).

Run with `python -m benchmarks --only cluster_loops`; see `benchmarks.cluster`.
"""

from __future__ import annotations

from benchmarks.cluster import run_against_loops as run

__all__ = ["run"]
