"""Comparison 4's input pipelines alone, in CPU time per pass over the MLP job's data.

Where the uncached TFRecord side's extra time comes from, with no training competing:
each side is a dataset consumed inside TensorFlow (`Dataset.reduce`, no Python per
batch) for a few passes over the 4,096 examples of comparison 4's MLP job, and timed in
CPU seconds of the whole process (every tf.data thread included). The sides:

- kdist's pipeline on the in-memory source (cached: the reference) and on the TFRecord
  files with `data.cache=false` (read whole, checked, parsed, then shuffled and batched
  per example), both batch 32 as in comparison 4;
- the reader's own work alone: the 4 files read, checked and parsed into per-file
  blocks, nothing after; and the files' bytes read, nothing else (any reader's floor);
- a reader with no per-example stage at all (not in kdist: measured to see whether one
  would meet the target): the 4 files read, checked and parsed, the examples of the pass
  put in a random order with one `gather`, and batches sliced out.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from typing import Any

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, interleave, load_average, summarize
from benchmarks.jobs import Job, kdist_pipeline, synthetic_data

__all__ = ["bytes_only", "permuted", "read_only", "run"]

MEMORY = "kdist pipeline, in-memory (cached)"
FILES = "kdist pipeline, TFRecord (cache=false)"
BYTES_ONLY = "the 4 files' bytes read only (tf.io.read_file)"
READ_ONLY = "the 4 files read, checked and parsed only"
PERMUTED = "TFRecord read whole, one permutation a pass, batches sliced"
BATCH = 32


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pass_cost(dataset: Any, elements_per_pass: int, passes: int) -> Callable[[], float]:
    """A round: CPU seconds per pass of `dataset`, consumed `passes` times in TensorFlow."""
    import tensorflow as tf

    def count(elements: int) -> None:
        dataset.take(elements).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)

    def run() -> float:
        started = _cpu_seconds()
        count(elements_per_pass * passes)
        return (_cpu_seconds() - started) / passes

    return run


def read_only(reader: Any) -> Any:
    """The reader's own work: each file read whole, checked and parsed; one element a file."""
    from kdist.data.tfrecords import read_whole_file, whole_files

    shards = [reader._shard[f] for f in reader.split_files("train")]
    return whole_files(shards).map(lambda *file: reader._examples(read_whole_file(*file)))


def bytes_only(reader: Any) -> Any:
    """Each training file's bytes (`tf.io.read_file`), unchecked: one element a file."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(list(reader.split_files("train"))).map(
        tf.io.read_file
    )


def permuted(reader: Any, batch: int, seed: int) -> Any:
    """Batches of a reader with no per-example stage (a prototype, not kdist's reader).

    Each pass reads every training file whole, checked and parsed as `read_only`, puts
    the pass's examples in a new random order (`stateless_shuffle` seeded by `seed` and
    the pass number) with one `gather`, and slices `batch`-sized batches out of it. The
    split must divide into whole batches.
    """
    import tensorflow as tf

    from kdist.data.tfrecords import read_whole_file, whole_files

    shards = [reader._shard[f] for f in reader.split_files("train")]
    size = reader.size("train")
    if size % batch:
        raise ValueError(f"{size} examples do not divide into batches of {batch}")
    listed = whole_files(shards)
    files = [tf.stack([e[k] for e in listed]) for k in range(len(listed.element_spec))]

    def one_pass(index: Any) -> tuple[Any, ...]:
        blocks = [
            reader._examples(read_whole_file(*(c[i] for c in files))) for i in range(len(shards))
        ]
        order = tf.random.experimental.stateless_shuffle(
            tf.range(size, dtype=tf.int64), tf.stack([tf.constant(seed, tf.int64), index])
        )
        return tuple(
            tf.reshape(
                tf.gather(tf.concat([b[k] for b in blocks], 0), order),
                [size // batch, batch, *blocks[0][k].shape[1:]],
            )
            for k in range(len(blocks[0]))
        )

    passes = tf.data.Dataset.range(2**62).map(one_pass)
    return passes.flat_map(lambda *batches: tf.data.Dataset.from_tensor_slices(batches))


def run(ctx: Context, path: str, job: Job, group: str) -> list[Comparison]:
    """The rows; `path` holds `job`'s arrays as 4 TFRecord files (comparison 4's)."""
    _, memory = kdist_pipeline(job, synthetic_data(job), BATCH)
    files_data = ["data=tfrecord", f"data.source.path={path}", "data.cache=false"]
    reader, files = kdist_pipeline(job, files_data, BATCH)
    if not reader.reads_whole(reader.split_files("train")):
        raise RuntimeError(f"{path}: the files are not read whole")
    passes = ctx.scale(5, 1)
    batches = reader.size("train") // BATCH
    files_per_pass = len(reader.split_files("train"))
    cases = [
        Case(MEMORY, _pass_cost(memory, batches, passes)),
        Case(FILES, _pass_cost(files, batches, passes)),
        Case(READ_ONLY, _pass_cost(read_only(reader).repeat(), files_per_pass, passes)),
        Case(BYTES_ONLY, _pass_cost(bytes_only(reader).repeat(), files_per_pass, passes)),
        Case(PERMUTED, _pass_cost(permuted(reader, BATCH, seed=42), batches, passes)),
    ]
    rounds = ctx.rounds_for(7)
    ctx.log(f"input/stages: {', '.join(c.name for c in cases)}; {rounds} rounds of {passes} passes")
    before = load_average()
    samples = interleave(cases, rounds)
    load = {"before": before, "after": load_average()}
    details = {
        "examples_per_pass": reader.size("train"),
        "batch": BATCH,
        "passes_per_round": passes,
        "time": "CPU seconds of the process per pass (every thread), consumed by Dataset.reduce",
    }
    return [
        summarize(
            id=f"input/stages_{key}",
            group=group,
            title=f"input pipeline alone, CPU per pass of the MLP data: {name} / in-memory",
            samples=samples,
            a=name,
            b=MEMORY,
            unit="ms CPU/pass",
            scale=1000.0,
            load=load,
            details=details,
        )
        for key, name in (
            ("files", FILES),
            ("read_only", READ_ONLY),
            ("bytes_only", BYTES_ONLY),
            ("permuted", PERMUTED),
        )
    ]
