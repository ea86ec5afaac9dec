"""`python -m benchmarks.profile_summary PATH`: the busiest TensorFlow ops of a profile.

Reads the `*.xplane.pb` files that `callbacks.tensorboard.profile_steps` (or any
`tf.profiler` session) wrote under PATH, and prints the host ops that took the most
time, summed over threads: a text view of what TensorBoard's Profile tab shows, for
machines without `tensorboard-plugin-profile`. Nested events are counted in their own
right (a function call includes the ops it ran), so shares can add up to more than 100%.

Example:

```bash
python -m kdist.train trainer.epochs=1 'callbacks.tensorboard.profile_steps=[20,40]'
python -m benchmarks.profile_summary outputs/2026-11-21/10-00-00/tensorboard --top 15
```
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "summarize_profile"]


def summarize_profile(path: Path, *, top: int = 20) -> list[tuple[str, float, int, float]]:
    """The `top` host events by total time: (name, milliseconds, count, share of the span).

    Args:
        path: an `.xplane.pb` file or a folder searched for them (the newest is read).
        top: how many rows. Defaults to `20`.

    Returns:
        Rows sorted by total time; the share is of the profiled wall span.

    Raises:
        FileNotFoundError: when there is no `.xplane.pb` under `path`.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = [path] if path.is_file() else sorted(path.rglob("*.xplane.pb"), key=_mtime)
    if not files:
        raise FileNotFoundError(f"no *.xplane.pb under {path}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(files[-1].read_bytes())
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    start, end = float("inf"), 0.0
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for event in line.events:
                name = names.get(event.metadata_id, "?")
                totals[name] += event.duration_ps / 1e9
                counts[name] += 1
                begin = base + event.offset_ps
                start = min(start, begin)
                end = max(end, begin + event.duration_ps)
    span_ms = max((end - start) / 1e9, 1e-9)
    rows = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return [(name, ms, counts[name], ms / span_ms) for name, ms in rows]


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m benchmarks.profile_summary`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_summary")
    parser.add_argument("path", type=Path, help="an .xplane.pb file or a folder holding one")
    parser.add_argument("--top", type=int, default=20, help="rows to print")
    args = parser.parse_args(argv)
    print(f"{'ms':>10} {'count':>7} {'share':>6}  event")
    for name, ms, count, share in summarize_profile(args.path, top=args.top):
        print(f"{ms:10.1f} {count:7d} {share:6.1%}  {name[:110]}")


if __name__ == "__main__":
    main()
