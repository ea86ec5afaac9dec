"""The time split's rows on the lent 16-core machine (issue 53), ready to run there.

Rows, in this order each round (`ROUNDS`, default 1): one process on 16 cores at global
batch 256 (`one_16cores_b256`), 2 MWMS workers on 8+8 cores at 256 in `every_step`,
`local_sgd` and `diloco` at `sync_every=32`, each with its time split
(`benchmarks.time_split`), and one process on 8 cores at 128 (`one_8cores_b128`, weak
scaling); `KDIST_BENCH_STEPS` (default 48) steps an epoch. Each row runs under its own
timeout (`ROW_TIMEOUT`, default 150 s) and is appended to `$OUT/rows.jsonl` as soon as it
exists; at the end `$OUT/time-split-16core.json` and `.md` hold the table
(`benchmarks.time_split.markdown`). Modelled on `../shared/tools/device_rows.py`.

On the device (`../shared/DEVICE.md`: the two chunk calls first), with the committed
HEAD rather than `.device/proj`'s older copy or the working tree's uncommitted edits:
here `git archive --format=tar.gz -o .device/head.tgz HEAD`, then one call carrying
`.device/c3`, `.device/small`, `.device/run.sh` and `.device/head.tgz`:

    bash .device/run.sh true; mkdir -p /tmp/head && tar -xzf .device/head.tgz -C /tmp/head \
      && cd /tmp/head && PYTHONPATH=/tmp/site:/tmp/head PYTHONUNBUFFERED=1 \
      TF_CPP_MIN_LOG_LEVEL=2 KDIST_SPLIT_COMMIT=<hash> ROUNDS=1 ROW_TIMEOUT=150 \
      timeout 480 python3 -m benchmarks.device_split > $OUT/log.txt 2>&1

(`run.sh true` unpacks TensorFlow and ends with a `cd` error, harmless; the copy has no
`.git`, hence `KDIST_SPLIT_COMMIT`.) A round took 150 s there on 2026-11-28
(`results/time-split-16core.md`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

MODES = ("every_step", "local_sgd_32", "diloco_32")
SHARES = ("step", "average", "read", "callbacks", "other")
SHARES += ("step_beyond_fastest", "average_beyond_fastest", "read_beyond_fastest")


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp/device-split"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KDIST_SPLIT_CORES", str(os.cpu_count()))
    os.environ.setdefault("KDIST_BENCH_STEPS", "48")
    from benchmarks.time_split import markdown, measure

    def record(tag: str, row: dict[str, Any]) -> None:
        line = {"row": tag, "cores": os.cpu_count(), **_compact(row)}
        print(json.dumps(line), flush=True)
        with open(out / "rows.jsonl", "a") as rows:
            rows.write(json.dumps(line) + "\n")

    results = measure(
        int(os.environ.get("ROUNDS", "1")),
        MODES,
        half=True,
        timeout=float(os.environ.get("ROW_TIMEOUT", "150")),
        on_row=record,
        keep_going=True,
    )
    (out / "time-split-16core.json").write_text(json.dumps(results, indent=1) + "\n")
    note = f"Measured on the lent machine ({os.cpu_count()} CPUs) by `benchmarks.device_split`."
    (out / "time-split-16core.md").write_text(markdown(results, [note, ""]))
    print(markdown(results, [note, ""]), flush=True)
    sys.stdout.flush()


def _compact(row: dict[str, Any]) -> dict[str, Any]:
    """A row for one line: examples/s and each task's shares in percent."""
    if "error" in row:
        return {"error": row["error"], "wall": round(row["seconds"], 1)}
    split = {}
    for task, s in row["split"].items():
        wall = s["wall"] or 1.0
        split[task] = {
            "epoch_ms": round(1000 * s["wall"]),
            **{key: round(100 * s[key] / wall, 1) for key in SHARES},
            "outside_steps_pct": round(100 * s["outside_steps_share"], 1),
        }
    return {
        "ex_s": round(row["examples_per_sec"], 1),
        "split_pct": split,
        "wall": round(row["seconds"], 1),
        "time": time.strftime("%H:%M:%S", time.gmtime()),
    }


if __name__ == "__main__":
    main()
