"""What limits the comparisons that miss their target, shown under the tables.

Written from the profiles and measurements described in `benchmarks/README.md`; keyed by
comparison id.
"""

from __future__ import annotations

__all__ = ["NOTES"]

NOTES: dict[str, str] = {}
