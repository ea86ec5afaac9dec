"""The troubleshooting page's second half: clusters and machines (hangs, ports, `TF_CONFIG`,
memory, disk, a worker that died), what the user sees and what to do.

Where kdist's own check makes the message, it is made here by that check (`TF_CONFIG`
parsed by `kdist.cluster.tf_config`, the port refusal of `kdist.strategies.multi_worker`),
so the page cannot drift from it. The other messages come from TensorFlow, the kernel or a
run that fails half way; they were measured by running the case (TensorFlow 2.21, Keras
3.15, 2026-11-27) and each names the kdist file that prints its kdist part, which a test
checks still holds that text.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdist.process import exit_codes

__all__ = ["TROUBLES", "Trouble", "cluster_sections", "tf_config_message"]


@dataclass(frozen=True, kw_only=True)
class Trouble:
    """A problem of a cluster or a machine.

    Args:
        title: the section's heading.
        command: the command that meets it (shown after `$`).
        shown: what the user sees (the end of it).
        cause: why it happens.
        fix: what to do.
        printed_by: the parts of `shown` that kdist prints (a test finds each in kdist's
            source). Defaults to none.
    """

    title: str
    command: str
    shown: str
    cause: str
    fix: str
    printed_by: tuple[str, ...] = ()


def tf_config_message(text: str) -> str:
    """What `kdist train` prints for `TF_CONFIG=text` (its one line), from kdist's parser.

    Raises:
        AssertionError: kdist accepted `text`.
    """
    from kdist.cluster.tf_config import parse_tf_config
    from kdist.config.errors import ConfigError

    try:
        parse_tf_config(text)
    except ConfigError as error:
        return f"kdist: config error: {error}"  # `kdist.config.errors.exit_with`'s line
    raise AssertionError(f"TF_CONFIG={text} was accepted")


def _port_message(address: str) -> str:
    from kdist.cluster.tf_config import parse_tf_config
    from kdist.strategies import multi_worker

    info = parse_tf_config(f'{{"cluster": {{"worker": ["{address}"]}}, "task": {_TASK0}}}')
    return f"kdist: config error: {multi_worker._port_taken(info)}"  # the refusal kdist prints


_TASK0 = '{"type": "worker", "index": 0}'
# What a user writes wrong in TF_CONFIG, in the order they meet it.
TF_CONFIG_MISTAKES: tuple[tuple[str, str], ...] = (
    ("cut short (a quote or a brace lost in the shell)", '{"cluster": {"worker": ["h0:2222"]'),
    (
        "a key spelled wrong",
        '{"clusters": {"worker": ["h0:2222", "h1:2222"]}, "task": ' + _TASK0 + "}",
    ),
    (
        "an address without its port",
        '{"cluster": {"worker": ["h0", "h1:2222"]}, "task": ' + _TASK0 + "}",
    ),
    (
        "a task index past the list",
        '{"cluster": {"worker": ["h0:2222", "h1:2222"]}, "task": {"type": "worker", "index": 2}}',
    ),
)

_WORKER_DIED_SURVIVOR = """\
Error executing job with overrides: ['strategy=multi_worker_mirrored']
Traceback (most recent call last):
...
UnavailableError: Graph execution error:  (TensorFlow's error; its module path left out here)
...
Collective ops is aborted by: recvmsg:Connection reset by peer
The error could be from a previous operation. Restart your program to reset.
\t [[{{node while/adam/CollectiveReduceV2}}]] [Op:__inference_train_function_...]"""

TROUBLES: tuple[Trouble, ...] = (
    Trouble(
        title="A cluster that waits for a worker (nothing happens)",
        command='TF_CONFIG=\'{"cluster": {"worker": ["127.0.0.1:23461", '
        '"127.0.0.1:23462"]}, "task": {"type": "worker", "index": 0}}\' '
        "kdist train strategy=multi_worker_mirrored",
        shown="# nothing: no line on the terminal and an empty train.log for the 10 minutes\n"
        "# we waited; Ctrl-C (SIGINT) and SIGTERM did not stop it, kill -9 did",
        cause="`multi_worker_mirrored` starts only when every task of `TF_CONFIG`'s "
        "`cluster` has connected (TensorFlow's coordination service); here worker 1 was "
        "never started. The same happens when a task's address is wrong or a firewall "
        "drops its port.",
        fix="Start every task of the list, each with the same `cluster` and its own "
        "`task.index`; `kdist doctor` on each machine prints the cluster it sees. On one "
        "machine `kdist launch --workers N` starts them all, and `--timeout SECONDS` stops "
        "a cluster that never starts. Stop a waiting process with `kill -9 PID`.",
    ),
    Trouble(
        title="A port in use",
        command='TF_CONFIG=\'{"cluster": {"worker": ["127.0.0.1:23460"]}, "task": '
        '{"type": "worker", "index": 0}}\' kdist train strategy=multi_worker_mirrored   '
        "# another process listens on 23460",
        shown="E0000 ... add_port.cc:83] Failed to add port to server: No address added out "
        "of total 1 resolved for '0.0.0.0:23460'\n"
        "E0000 ... grpc_server_lib.cc:618] UNKNOWN: Could not start gRPC server\n" + "{port}",
        cause="Each task's gRPC server listens on the port of its own address in "
        "`TF_CONFIG` (on every interface); another process (often the same job started "
        "before and not stopped) holds it, or the address is not one of this machine's.",
        fix="Find the holder with `ss -ltnp | grep :23460` and stop it, or give the task "
        "another port (the same change in every task's `TF_CONFIG`). `kdist launch` picks "
        "free ports itself, and when one is taken between choosing and binding it says "
        "`a port was taken between choosing and binding it; retrying with new ports`.",
        printed_by=("a port was taken between choosing and binding it; retrying",),
    ),
    Trouble(
        title="Out of memory",
        command="kdist train model=resnet trainer.global_batch_size=4096",
        shown="# on a GPU, the end of TensorFlow's traceback (its form; not reproduced for "
        "this page):\n"
        "ResourceExhaustedError: ... OOM when "
        "allocating tensor with shape[...] and type float on ...device:GPU:0 by allocator "
        "GPU_0_bfc\n"
        "# on a CPU machine the kernel's OOM killer ends the process; the shell prints\n"
        "Killed\n"
        "# (exit status 137); under kdist launch:\n"
        "[launch] worker 0 exited with status 137 (SIGKILL); stopped every task",
        cause="A replica's share of the batch (`trainer.global_batch_size` divided by the "
        "replicas), the model's activations and the optimizer's state do not fit the "
        "device's memory. kdist does not catch this error: it is TensorFlow's traceback, "
        "exit status 1.",
        fix="Lower `trainer.global_batch_size` (or use more replicas for the same global "
        "batch), train in `runtime.mixed_precision=mixed_bfloat16` (or `mixed_float16` on "
        "older GPUs), keep `runtime.memory_growth=true` (the default) so that two processes "
        "can share a GPU, and check with `nvidia-smi` that no other process holds the "
        "memory. The run resumes from its last backup when run again.",
        printed_by=("exited with status", "; stopped every task"),
    ),
    Trouble(
        title="A full disk",
        command="kdist train model=cnn hydra.run.dir=/tmp/full/run   # a 2 MB file system",
        shown="kdist: write error: the disk holding /tmp/full/run/checkpoints is full (no "
        "space left writing /tmp/full/run/checkpoints/ckpt-22_temp/part-00000-of-00001.data-"
        "00000-of-00001.tempstate...; 2.0 MiB free there, the save needs about 7.5 MiB); "
        "free some space or give the run another folder (hydra.run.dir); no backup was "
        "saved before it: a re-run starts afresh",
        cause="A save (a backup, a checkpoint, `model.keras`) could not be written: the disk "
        "or the quota is full, or the folder is read-only. kdist stops at once with exit "
        f"status {exit_codes.EXIT_WRITE_FAILED}; the saves made before are intact and no "
        "half-written one is left.",
        fix="Free space (old runs under `outputs/`, `checkpoints/` of finished runs: "
        "`callbacks.checkpoint.keep` bounds how many are kept) or move the run folder to a "
        "larger disk, then run the same command again: it resumes from the last backup.",
        printed_by=("kdist: write error: ", "is full (no space left writing"),
    ),
    Trouble(
        title="A cluster whose worker died",
        command="kdist launch --workers 2 -- strategy=multi_worker_mirrored   "
        "# then worker 1 is killed (kill -9, a lost machine)",
        shown="[launch] worker 1 exited with status 137 (SIGKILL); stopped every task\n\n"
        "# without the launcher (Kubernetes, SLURM), the worker that is left ends with "
        "exit status 1 after:\n" + _WORKER_DIED_SURVIVOR,
        cause="A synchronous step needs every worker: when one is gone the others' "
        "all-reduce fails (at once when its process died on a reachable machine, after "
        "about 10 s of missed heartbeats when the machine vanished) and they exit with "
        "status 1. A worker that hangs instead of dying blocks them until "
        "`strategy.timeout_seconds` (then `DeadlineExceededError`), or for ever when it "
        "is null, the default.",
        fix="Restart the whole cluster with the same command: every worker resumes from "
        "the last backup (`callbacks.backup.every_n_steps`), at the step it was saved. "
        "`kdist launch --max-restarts 3` does it by itself, and `--min-workers 1` goes on "
        "with fewer workers when one is gone for good; on Kubernetes a JobSet's "
        "`failurePolicy.maxRestarts` (recipes/cluster/). Set `strategy.timeout_seconds=60` "
        "so a hung worker fails the step instead of stopping the cluster.",
        printed_by=("exited with status", "; stopped every task"),
    ),
)


def cluster_sections() -> list[str]:
    """The Markdown lines of the page's "Clusters and machines" part."""
    lines = [
        "## Clusters and machines",
        "",
        "What a multi-worker run, a machine's memory or its disk do when something is wrong. "
        "The messages of kdist's own checks (`TF_CONFIG`, a port) are made by those checks "
        "when this page is generated; the others were measured by running the case "
        "(TensorFlow 2.21 on CPU, 2026-11-27), except the GPU's out-of-memory error.",
        "",
        "### TF_CONFIG mistakes",
        "",
        "kdist reads `TF_CONFIG` before TensorFlow starts and refuses a mistake in one "
        f"line, with exit status {exit_codes.EXIT_CONFIG_ERROR}:",
        "",
    ]
    for what, text in TF_CONFIG_MISTAKES:
        lines += [
            f"- {what}:",
            "",
            "    ```console",
            f"    $ TF_CONFIG='{text}' kdist train strategy=multi_worker_mirrored",
            f"    {tf_config_message(text)}",
            "    ```",
            "",
        ]
    lines += [
        "**Fix:** write `TF_CONFIG` as JSON with `cluster` (job name -> list of "
        "`host:port`) and `task` (`type`, `index`); every task gets the same `cluster` "
        "and its own `task`. `kdist doctor` prints the cluster this process sees; the "
        "recipes in `recipes/cluster/` build it for Kubernetes and SLURM.",
        "",
    ]
    for trouble in TROUBLES:
        shown = trouble.shown.replace("{port}", _port_message("127.0.0.1:23460"))
        lines += [
            f"### {trouble.title}",
            "",
            "```console",
            f"$ {trouble.command}",
            shown,
            "```",
            "",
            f"**Cause:** {trouble.cause} **Fix:** {trouble.fix}",
            "",
        ]
    return lines
