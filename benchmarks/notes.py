"""What limits the comparisons that miss their target, shown under the tables.

Written from the profiles and measurements described in `benchmarks/README.md`; keyed by
comparison id.
"""

from __future__ import annotations

__all__ = ["FINDINGS", "NOTES"]

NOTES: dict[str, str] = {}

# The analysis under "Findings" in a full run's results.md.
FINDINGS = ""
