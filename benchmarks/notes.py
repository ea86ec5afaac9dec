"""What limits the comparisons that miss their target, shown under the tables.

Written from the committed run (`benchmarks/results/`) and the profiles described in
`benchmarks/README.md`; keyed by comparison id. `python -m benchmarks --render
benchmarks/results/results.json` rewrites the markdown after an edit here.
"""

from __future__ import annotations

__all__ = ["FINDINGS", "NOTES"]

NOTES: dict[str, str] = {
    "input/mlp_k32_files": (
        "Missed: 1.315 (CPU 1.285) in this run, against 1.317 for the record-by-record reader "
        "and 1.101 for the per-file-blocks floor (the rows below); 1.208 and 1.287 in the two "
        "runs before. In `make bench` this row runs in the process that ran the engine and "
        "overhead suites first, and has come out 0.1-0.2 above the same comparison run alone "
        "(`--only input`: 1.004, 1.138, 1.153, 1.111 and 1.087 on one morning, 1.165, 1.091, "
        "1.127 and 1.172 the next; 1.05-1.16 in six scratch processes of the two sides on a "
        "third): the ratio moves from process to process by more than the target's margin, "
        "while each process's rounds agree. Why no reader meets 1.05 on this job, from the "
        "stage rows below (the pipelines alone, CPU per pass over the 4,096 examples, no "
        "training): kdist's in-memory pipeline costs 14.5 ms, the uncached TFRecord one 33.5 "
        "ms; reading, checking and parsing the 4 files alone costs 11.4 ms, 0.78 of the whole "
        "in-memory pipeline, and reading their bytes alone 6.0 ms (0.49). A training pass is "
        "128 steps, about 80 ms of CPU, and in the processes that gave 1.10-1.15 a third to a "
        "half of the reader's extra CPU (19 ms) showed in the CPU ratio (1.08-1.12): at that "
        "rate a reader whose stages after the parse cost no more than the in-memory ones "
        "would still be 1.05-1.07 for reading, checking and parsing alone, and 1.03-1.04 for "
        "the bytes alone. A prototype with no per-example stage (`stages_permuted`) costs 1.98 of "
        "the in-memory pipeline. Shapes measured the same way (scratch, 7-9 rounds): "
        "`interleave`, `unbatch` and `flat_map` after per-file blocks are within 1 ms of each "
        "other, 2-4 ms a pass above `from_tensor_slices`; the repeat before or after the "
        "reader's map makes no difference (22.40 against 22.42 ms), so functions set up again "
        "each pass cost nothing here; in training, 16 files of 256 records cost more than 4 of "
        "1,024 (1.16-1.22 against 1.11-1.15 in 3 processes each), so per-file costs outweigh "
        "cache sizes. A CPU profile (`perf record`, "
        "software clock, 250 fits of each side in its own process, start-up left out) shows "
        "where: both sides spend about 35 % of their CPU in TensorFlow's thread pools "
        "switching and spinning (the kernel's `finish_task_switch` and spin unlock, Eigen's "
        "`PopBack` and `GlobalSteal`), and the reader adds memory copies (`memmove` 2.9 % "
        "against 1.5 %), allocation (`malloc`/`free` about 1.5 % more), the kernel's copy out "
        "of the page cache (0.9 %) and the checksum (`farmhash` 0.5 %): its own work is "
        "4-5 % of the CPU, and costs the step 2-3 times that in wall time. Thread pools were "
        "not the lever: with `runtime.intra_op_threads=1` (both sides 35-40 % faster, 0.22-"
        "0.25 ms a step) the ratio was 1.126 and 1.138, and with one inter-op thread 1.03-1.15"
        " because the in-memory side slowed down (0.42-0.45 ms) and the reader did not. "
        "History: 1.82 before issue 14 (a `scan` per "
        "record with a formatted message, `parse_single_example` per record); 1.46 with records"
        " parsed 256 at a time; 1.22-1.23 with each file read by the `TFRecordDataset` op "
        "itself. Files whose manifest gives a record length and a farmhash64 checksum are read "
        "whole: one `tf.io.read_file`, the size and checksum checked, the records cut out with "
        "one `substr` and parsed in the same function, then 256 examples of each of 4 files in "
        "turn. Where the rest goes, measured in one process with fits alternated (21 rounds, "
        "3-4 processes each): the pipeline's shape alone (`benchmarks/blocks.py`: 4 per-file "
        "blocks a pass from a parallel map, nothing read) costs 1.03-1.12 of the cached source;"
        " the same with each file read and checksummed but not parsed 1.12-1.13; the reader "
        "1.08-1.19. Handing out the same arrays with `from_tensor_slices` and no map costs "
        "0.98-1.06. So every part of a reader that makes per-file blocks each pass costs a few "
        "percent on this 0.4 ms step sharing 2 cores, and none dominates. Tried, with no gain "
        "beyond the noise: a decoder that cuts the floats out of fixed-layout records without "
        "the protobuf parse; `unbatch` or `flat_map` instead of the interleave; the files read "
        "in one function (one element a pass, with `tf.stack` or `concatenate`); the repeat "
        "moved before the map so its function is not set up again each pass; a sequential map; "
        "tf.data options (no injected prefetch, a private pool of 1 thread, no autotune, "
        "intra-op parallelism 1); a fixed prefetch of 64 batches; glibc malloc thresholds. The "
        "pipeline never made the training wait (no `next` over 0.3 ms with a 0.4 ms consumer), "
        "and page faults were about 100 per fit. Also tried since, fits alternated in one "
        "process (11 rounds, 2-3 processes each, the uncached reader against the cached "
        "source): the floats cut out of fixed-layout records with `decode_raw` and the labels "
        "read at their byte offset, every record's other bytes checked against the first's (no "
        "protobuf parse at all), interleaved 1.14 in two processes where the reader gave 1.20 "
        "and 1.09, and as one element a pass reordered with a transpose 1.17-1.24; files read "
        "in 256-record chunks by `FixedLengthRecordDataset` (each chunk checksummed; the "
        "reader's records in its order) 1.20-1.22 where the reader gave 1.12-1.15 and record by"
        " record 1.25-1.26, and on 4 files of 26 MB (32,768 examples, one pass a fit) 1.11 and "
        "1.25 against 1.14 and 1.21 whole and 1.18 and 1.30 record by record: reading files "
        "over `whole_file_max_mb` in chunks would gain a few percent, not the target. Measured "
        "alone, a pass of the 4 files costs 2.5 ms of CPU read and checked, 4.1-4.4 ms with the"
        " parse (1.0-1.1 us per example): 4-6 % of the fit's CPU per example (19-28 us) before "
        "the pipeline's shape. With training data the size of one 320-step epoch (10,240 "
        "examples, one pass a fit) the reader gives 1.08-1.11 in 3 processes (record by record "
        "1.24-1.28), so the miss does not come from re-reading the small data set 2.5 times a "
        "fit. A fit's system time is 0.005-0.02 ms a step above the cached source's (a few "
        "hundred page faults a fit against a few): part of the gap, not most of it. With the "
        "reader's threads at the lowest priority (a private pool of 2 threads at nice 19) it "
        "gave 1.148 where the same reader at normal priority gave 1.122: the training does not "
        "lose the CPU time the reader's threads take (a reader that yields the cores costs as "
        "much) but something both share, memory traffic and caches being the likely rest (not "
        "measured). The cache (the default) meets the target at 1.010."
    ),
    "input/mlp_k32_files_records": (
        "No target: the reader for files without a record length and checksum in their "
        "manifest (compressed files, records of several lengths, older manifests), "
        "forced here with `data.source.whole_file_max_mb=0`. Each file is read by "
        "TensorFlow's `TFRecordDataset` op, record by record with its CRCs."
    ),
    "input/mlp_k32_blocks": (
        "No target: the floor of any reader that produces per-file blocks on every pass "
        "(`benchmarks/blocks.py`): the in-memory arrays in 4 blocks a pass, each a slice "
        "from a parallel map, interleaved as the whole-file reader interleaves files; "
        "nothing is read, checked, parsed or copied. 1.101 in this run, 1.123 in the one "
        "before, 1.025-1.093 in six runs before that."
    ),
    "input/mlp_k32_memory_uncached": (
        "No target: the floor of any uncached source in this job (nothing is read; each "
        "example is sliced from the arrays into a fresh tensor on every pass)."
    ),
    "input/stages_files": (
        "No target: the two pipelines of the `mlp_k32_files` row alone, with no training "
        "(`benchmarks/input_stages.py`): CPU seconds of the whole process (every tf.data "
        "thread) per pass over the 4,096 examples, consumed inside TensorFlow. In training "
        "about half of this extra CPU showed in the processes that gave 1.10-1.15 (see that "
        "row's note)."
    ),
    "input/stages_read_only": (
        "No target: the whole-file reader's own work, nothing after it: the 4 files read, "
        "their size and farmhash64 checked, the records cut out and parsed into per-file "
        "blocks. It alone costs 0.78 of the whole in-memory pipeline: at the rate the extra "
        "CPU showed in training (see `mlp_k32_files`), 1.05-1.07 on its own, before any "
        "stage after it costs more than the in-memory source's. A decoder without the cut "
        "into records and the protobuf parse (`decode_raw` of the whole file, the floats "
        "and label taken at their offsets, every record's other bytes checked against the "
        "first's; scratch, 9 rounds, the same values as the parse) costs the same: 9.72 "
        "against 9.73 ms a pass, where the bytes alone cost 6.12."
    ),
    "input/stages_bytes_only": (
        "No target: the 4 files' bytes read (`tf.io.read_file`), nothing checked or parsed: "
        "the floor of any reader of these files. The checksum, the cut into records and the "
        "parse make the rest of `read_only` (scratch, per op: the checksum about 0.8 ms a "
        "pass, the cut into records 3.6 ms, the parse within the noise)."
    ),
    "input/stages_permuted": (
        "No target: a prototype, not kdist's reader: after the same read, check and parse, "
        "the pass's examples put in a random order with one `gather` and batches sliced out, "
        "so no stage handles single examples. It costs less than kdist's pipeline (1.98 "
        "against 2.31) and still twice the in-memory one, and it would replace the shuffle "
        "buffer's order with one permutation a pass: not adopted."
    ),
    "defaults/default_vs_loop": (
        "Met: 0.954 (CPU 0.926; 0.964 and 0.892 in the two runs before). Saves were the "
        "cost (a backup every 100 steps and a checkpoint every "
        "epoch: 85 per 20-epoch fit, plus the final one). TensorFlow's async helper spent "
        "20-30 ms of CPU per save in Python on its own thread, holding the GIL against "
        "the step calls. Now the next train call copies a save's variables to host "
        "memory before its first step (no call of its own on the training thread), and "
        "kdist's writer thread writes them with a traced `tf.train.Checkpoint.write` and "
        "then does the CheckpointManager bookkeeping, starting while the training thread "
        "is in a train call. There are two sets of host copies, so a checkpoint a few "
        "steps after a backup does not wait for the backup's write, and the step both "
        "savers save at the end is written once and hard-linked. The 3-epoch version of "
        "this job before the saver work: 1.260 (CPU 1.243) at a load of 0.3 "
        "(`results/rerun-defaults-before.json`)."
    ),
    "defaults/default_share": (
        "Met: 1.96 % of a 20-epoch fit; 2.62 %, 1.96 %, 2.40 %, 2.15 %, 2.8 % and 5.0 % in "
        "the six runs before; a 3-epoch run 4.1 % (4.6 %, 4.1 %, 3.2 %, 4.0 % and 5.2 % "
        "before). "
        "Sampling the "
        "training thread with py-spy showed that every TensorFlow call between two step calls"
        " costs 15-40 times its warm cost (40 us for the first `.numpy()` after a call), and "
        "that the writer thread's Python competed with the hooks for the GIL. Changes, "
        "measured in one process with the variants alternated fit by fit: the next call "
        "copies a save's variables (169 -> 134 ms outside the step calls); the learning rate "
        "read with the variable's `numpy()`, the progress bar at 10 redraws a second, a new "
        "epoch's metric reset inside its first call (136 -> 123 ms); a queued write starts "
        "while the training thread is in a train call (141 -> 98 ms). Tried without a gain: "
        "Keras's asynchronous batch-end hooks, the logs converted to floats in the runner, "
        "TensorFlow's copy function inlined. What is left (the hook breakdown in the "
        "details): the TensorBoard and speed scalars at each epoch end, the progress bar and "
        "the logs converted to floats after each call, and the epoch's checkpoint, whose copy"
        " still takes a call of its own while the backup before it is written."
    ),
    "input/cnn_k1_cached": (
        "Met: 0.995 (CPU 0.991; 0.991, 0.989, 0.975 and 1.022 in the four runs before). With "
        "`cache=true` "
        "the steady state reads the same cached tensors as the in-memory source. In an "
        "earlier run it missed on wall time (1.24, CPU 0.995): its 7 rounds of 4 CNN steps "
        "ran at a load average of 5-5.5 (other jobs' tests), and single rounds vary by ±40%."
    ),
    "strategy/mirrored1_vs_none_mlp_k1": (
        "Missed at 1 step per call: 1.116 (CPU 1.105; 1.088, 1.139, 1.075, 1.087, 1.100, 1.040 "
        "and 1.157 in earlier runs). At 32 steps per call missed by 0.001 in this run, 1.031 "
        "(CPU 1.000; 0.980, 0.993, 1.008, 1.031 and 0.987 in the five before): within the "
        "noise of the target. What is left is"
        " a per-call cost of a function under MirroredStrategy (about 0.1 ms: mirrored "
        "variables and the per-replica iterator as captured inputs), which "
        "`trainer.steps_per_execution` amortises. The hand-written loop pays 14% (1 step "
        "per call) and 11% (32) for the same strategy; kdist's CPU input path (see "
        "Findings) removed most of it."
    ),
    "strategy/mirrored1_vs_none_mlp_k32": (
        "Missed by 0.001: 1.031 (CPU 1.000); 0.980 in the run before, then 0.993, 1.008, "
        "1.031 (missed by 0.001) and 0.987. See the note above."
    ),
    "cluster/mwms2_vs_one_process": (
        "Missed: 0.541 (0.516 and 0.475 in the two runs before, 0.54, 0.54, 0.45 and 0.65 "
        "earlier). On one "
        "2-core machine two workers share the cores that one process already uses, so the "
        "best possible is 1.0x; then each step all-reduces 13 MB of gradients (3.3M "
        "parameters) through gRPC on loopback and every worker applies Adam to all "
        "parameters. The two processes' thread pools used to oversubscribe the cores (2 "
        "intra-op threads each); `kdist.launch` now gives each worker `cores // workers` "
        "(1 here): 1,906 examples/s against 1,704 in the run before, and 1,937-1,991 against "
        "1,725-1,761 in 3 alternated launches each. A profile of worker 0 "
        "(`profile_steps=[17,32]`, `python -m benchmarks.profile_summary`, load about 1): "
        "299 ms per step against 149 ms in one process; the collective all-reduce ops 16% "
        "of it, the convolution gradients (half the batch) 1.4x slower than the whole batch"
        " in one process, the optimizer update 4.7x. None of it is in kdist's loop: "
        "TensorFlow's tutorial loop on the same 2 workers (suite `cluster_loops`, "
        "`results/cluster-loops.md`, 3 rounds) reaches 0.50 of one process, and kdist / "
        "that loop is 1.05 (higher is faster). The target needs workers with their own "
        "cores (other machines)."
    ),
    "cluster/ps_vs_one_process": (
        "Missed: 0.65 (0.64, 0.66, 0.75, 0.68, 0.55 and 0.62 in earlier runs). The worker gets "
        "both cores (`cores // workers` with one worker), as before."
        " The worker reads all 3.3M "
        "parameters"
        " (13 MB) from the parameter server and sends 13 MB of gradients back at every "
        "step, over gRPC on loopback, and the ps applies Adam, with the ps, the worker and "
        "the chief on the same 2 cores: about 140 ms more per step here (246 -> 383 ms). "
        "Packing 16 steps per `schedule` removes the coordinator's per-call cost, not this "
        "per-step traffic. TensorFlow's tutorial loop on the same cluster (suite "
        "`cluster_loops`, 3 rounds) reaches 0.56 of one process, and kdist / that loop is "
        "1.10 (higher is faster): kdist's parameter-server runner adds nothing. (The worker"
        " runs in `kdist.server`, which the profile hook does not reach; the chief's "
        "profile shows only scheduling.)"
    ),
    "threads/mlp_k32_intra1": (
        "No target: what `runtime.intra_op_threads=1` does to a small model. 0.604 (0.599 "
        "and 0.62 in earlier runs of the suite): one thread per op takes 0.24 ms a step where "
        "TensorFlow's pool of 2 takes 0.40. A 784x128 matrix product on 32 rows is too small "
        "to split; the split costs more in hand-offs between the pool's threads (a third of "
        "the CPU in a profile: task switches and Eigen's work stealing) than it saves."
    ),
    "threads/cnn_k1_intra1": (
        "No target: the CNN's convolutions do use the second core: 1.152 (1.172 and 1.14 in "
        "earlier runs), so the default stays TensorFlow's and the key is the user's choice."
    ),
    "startup/kdist_train_vs_plain_script": (
        "No target. 3.56 s against 2.86 s in this run, 3.95 s against 3.11 s and 3.62 s "
        "against 2.90 s in the two before (5.30 s against 4.13 s, 5.16 s "
        "against 4.12 s and 4.87 s against 3.91 s in the three before: the import of "
        "TensorFlow varies most between machines and runs; a fit makes its "
        "first set of host copies and traces the copy into the train function before the "
        "first step, about 0.1-0.2 s). "
        "`python -m kdist.train` reaches its first step 0.7-1.2 s later: "
        "about 0.3 s more imports (Hydra, OmegaConf and kdist's modules: 3.86 s against "
        "3.55 s for keras and sklearn under `python -X importtime`), the config composed "
        "twice (the pre-check that turns a bad key into one line before TensorFlow "
        "starts, then Hydra's app), and the run directory (`.hydra/`, `train.log`)."
    ),
}

# The analysis under "Findings" in a full run's results.md.
FINDINGS = """
**Where kdist stands.** Its engine is faster than the hand-written tutorial loop on one
device (0.87 at 1 step per call, 0.77 at 32) and on 2 mirrored replicas (0.91, 0.77), as
fast on the CNN (0.97, 0.95: compute-bound, within the noise), and faster than Keras 3
`fit` on every job `fit` can run (0.49-0.62). Keras 3.15 `fit` cannot run the mirrored
job at 32 steps per call at all (keras-team/keras#19246). The engine's own time outside
the step calls is 0.7 ms per epoch with the minimal callbacks (1.4 % of a 10-epoch
run); with the default ones (TensorBoard, CSV, a checkpoint every epoch, a backup every
100 steps, curves, the progress bar) the default job runs at 0.96 of the hand-written
loop, 2.6 % of its wall time outside the step calls.

**Engine changes these measurements led to** (`kdist/engine/standard_runner.py`; the
engine, equivalence and checkpoint tests pass):

1. *Training input on CPU devices.* TensorFlow's default distributed input stages every
   batch through a multi-device iterator built for copying to accelerators. Measured on
   its own (a `tf.function` loop pulling batches and reducing a sum): 70-125 us per batch
   with no strategy, 250-380 us under OneDeviceStrategy, 250-480 us under
   MirroredStrategy with 1 replica and 430-610 us with 2; TensorFlow's
   `experimental_fetch_to_device=False` does not change it. kdist now iterates the
   dataset directly under OneDeviceStrategy on a CPU, and under MirroredStrategy on CPUs
   gives each replica its own input pipeline placed on its device
   (`InputReplicationMode.PER_REPLICA`, `experimental_place_dataset_on_device`): 100-130
   us (1 replica) and 150-220 us (2). Every step still sees the same global batch (the
   equivalence tests check mirrored against one device to 1e-5). Before, at a load
   average of 5-10: kdist mirrored 1 replica / no strategy 1.20 (1 and 32 steps per
   call), one_device / no strategy 1.09-1.12, kdist / hand-written at 1 step per call
   1.13; after: 1.04 and 0.99, 1.01 and 0.97, 0.90.
2. *Metric resets and epoch ends.* Resetting the loss and accuracy metrics eagerly cost
   0.7 ms per epoch on one device and about 5 ms under MirroredStrategy with 2 replicas
   (each assign goes to every replica), for training and again for validation; one
   compiled reset takes 0.3-0.6 ms. The epoch's training metrics are now the ones the
   last train call returned instead of a second eager read of the (mirrored) variables.

**Not engine-bound.** TFRecord input without the cache costs what an uncached file source
costs on a 0.4 ms step sharing 2 cores: every pass, per-file blocks made by a map (1.03-1.12
of memory with nothing read, the `blocks` row), then the bytes read, checked and parsed
(see the note under the table). Reading files whole took it from 1.19 to 1.08 in an
earlier run; this run measured 1.31 against 1.32 record by record, and runs of the input
suite alone 1.00-1.17. Measured alone (the `stages` rows), reading, checking and parsing
the files costs 0.78 of the whole in-memory pipeline's CPU: 1.05-1.07 in training on its
own, at the target's edge before any stage after it costs more than memory's. A CPU
profile puts the reader's own work (copies, allocation, the page-cache copy, the
checksum) at 4-5 % of the CPU. With the cache (the default) and on the CNN's 35 ms step
it is within 3 % of memory.

**Thread pools.** About a third of the small MLP's CPU goes to TensorFlow's intra-op pool
handing work between its 2 threads (task switches, Eigen's work stealing). One thread per
op (`runtime.intra_op_threads=1`, comparison 8) makes that job 0.60 of the time, and the
CNN 1.17, so the default stays TensorFlow's and the key is documented. Local clusters
were the clear case: N processes each sized their pool to every core, so `kdist.launch`
now gives each worker `cores // workers` intra-op threads; 2 MWMS workers of the CNN went
from 0.475 to 0.516 of one process.

The local clusters are limited by running every task on the same 2 cores (notes under
the table): the same clusters running TensorFlow's tutorial loops instead of kdist reach
0.50 (2 workers) and 0.56 (parameter server) of one process (measured before the launcher
shared the cores out), and kdist is 1.05x and 1.10x as fast as those loops
(`results/cluster-loops.md`, 3 interleaved rounds at a load average of 3-4).

**Measuring on a shared machine.** In earlier runs other jobs' tests ran throughout (load
average 1-6); in the last two the benchmark ran alone (load 0.6-3.1, its own two cores).
Interleaving keeps the ratios meaningful; the CPU-time ratio (not disturbed by waiting
for a core) agrees with the wall-time ratio within a few percent everywhere except the
noisiest rows. A process holding a dozen traced models spent 12 s in garbage
collection during one quick run (a full collection costs about a second on a loaded
core); the harness now freezes the objects that exist before timing. A
`kdist.launch --workers 2` run sometimes took 20-30 s longer to exit than to train
(worker 1 reporting a failed heartbeat to worker 0 after worker 0 had finished); the
benchmark only counts epoch times, but the launcher's shutdown is worth a look.
"""
