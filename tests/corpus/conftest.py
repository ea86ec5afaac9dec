"""The corpus's summary at the end of a session that ran any of its programs.

With `KDIST_CORPUS_REPORT=FILE` set, every program's results (pass with what was
measured, or the failure's line) are also written to FILE as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def pytest_terminal_summary(terminalreporter):
    import harness

    if not harness.RESULTS:
        return
    terminalreporter.section("corpus")
    for line in harness.summary_lines():
        terminalreporter.write_line(line)
    report = os.environ.get("KDIST_CORPUS_REPORT")
    if report:
        Path(report).write_text(json.dumps(harness.RESULTS, indent=1, sort_keys=True) + "\n")
