"""TFRecord shards with a manifest: writing, reading, integrity checks and file sharding.

Cost: about 10 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import compose, learnable_arrays

import kdist
from kdist.config.errors import ConfigError
from kdist.data import make_dataset_fn
from kdist.data.pipeline import resolve_shard_policy
from kdist.data.tfrecords import (
    READ_BATCH,
    checked_records,
    read_manifest,
    scan_file,
    write_manifest,
)
from kdist.data.tfrecords import write_tfrecords as write

# Each record: 8-byte length, 4-byte length CRC, payload, 4-byte payload CRC.
FRAME = 16


def _ids(count: int, start: int = 0):
    """Features whose first value is the example's id, so reads can be traced to files."""
    x, y = learnable_arrays(count, seed=start)
    x[:, 0] = np.arange(start, start + count)
    return x, y


def _write_ids(root: Path, *, train: int = 90, shards: int = 3) -> Path:
    write(root, {"train": _ids(train), "validation": _ids(30, 1000)}, num_shards={"train": shards})
    return root


def _record_offsets(path: Path) -> list[int]:
    data, offsets, at = path.read_bytes(), [], 0
    while at < len(data):
        offsets.append(at)
        length = int.from_bytes(data[at : at + 8], "little")
        at += length + FRAME
    return offsets


def test_writer_manifest_and_round_trip(tmp_path: Path):
    x, y = _ids(100)
    images = np.random.default_rng(0).integers(0, 255, (10, 4, 4, 3)).astype(np.uint8)
    manifest_path = write(tmp_path / "a", {"train": (x, y)}, num_shards=3)
    manifest = json.loads(manifest_path.read_text())
    entries = manifest["splits"]["train"]
    assert [e["file"] for e in entries] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert [e["records"] for e in entries] == [34, 33, 33]
    for entry in entries:
        assert (tmp_path / "a" / entry["file"]).stat().st_size == entry["bytes"]
    assert manifest["num_classes"] == 3 and manifest["features"]["x"]["shape"] == [8]
    assert not list((tmp_path / "a").glob(".*"))  # no temporary files left
    source = kdist.data.tfrecord(path=str(tmp_path / "a"))
    read = list(source.dataset("train"))
    assert len(read) == 100 == source.size("train")
    got = {int(f.numpy()[0]): (f.numpy(), int(label)) for f, label in read}
    for i in range(100):
        np.testing.assert_allclose(got[i][0], x[i], rtol=1e-6)
        assert got[i][1] == y[i]
    assert source.size("validation") == 0  # the manifest has no validation split

    # uint8 images are stored raw and come back as [0, 1] floats; int tokens stay ints.
    write(tmp_path / "b", {"train": (images, np.arange(10) % 2)})
    image, _ = next(iter(kdist.data.tfrecord(path=str(tmp_path / "b")).dataset("train")))
    np.testing.assert_allclose(image.numpy(), images[0] / 255.0, rtol=1e-6)
    tokens = np.arange(30, dtype=np.int32).reshape(10, 3)
    write(tmp_path / "c", {"train": (tokens, np.arange(10) % 2)})
    first, _ = next(iter(kdist.data.tfrecord(path=str(tmp_path / "c")).dataset("train")))
    assert first.dtype == tf.int32 and list(first.numpy()) == [0, 1, 2]


def test_tfrecord_trains_under_mirrored(tmp_path: Path):
    x, y = learnable_arrays(1200)
    write(
        tmp_path / "d",
        {"train": (x[:960], y[:960]), "validation": (x[960:], y[960:])},
        num_shards=3,
    )
    cfg = compose(
        [
            "data=tfrecord",
            f"data.source.path={tmp_path / 'd'}",
            "strategy=mirrored",
            "trainer.epochs=1",
            "trainer.global_batch_size=32",
            "trainer.steps_per_execution=6",
            "trainer.verbose=0",
            "optimizer.learning_rate=0.01",
            "callbacks=minimal",
            f"run_dir={tmp_path / 'run'}",
        ]
    )
    exp = kdist.Experiment(cfg)
    exp.fit()
    assert exp.steps_per_epoch == 30
    assert exp.metrics()["validation"]["accuracy"] > 0.85


def test_flipped_byte_fails_naming_the_file(tmp_path: Path):
    root = _write_ids(tmp_path / "d")
    victim = root / "train-00001-of-00003.tfrecord"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    # Same size: only reading can tell. TensorFlow alone says "corrupted record at N".
    source = kdist.data.tfrecord(path=str(root))
    with pytest.raises(tf.errors.InvalidArgumentError, match=str(victim)) as caught:
        for _ in source.dataset("train"):
            pass
    assert "corrupt or truncated" in str(caught.value)
    assert "of the 30 records" in str(caught.value)
    # The same error stops training (inside the distributed train function).
    cfg = compose(
        [
            "data=tfrecord",
            f"data.source.path={root}",
            "strategy=mirrored",
            "trainer.epochs=1",
            "trainer.global_batch_size=30",
            "trainer.verbose=0",
            "callbacks=minimal",
            f"run_dir={tmp_path / 'run'}",
        ]
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=str(victim)):
        kdist.Experiment(cfg).fit()


def test_header_cut_truncation_fails_naming_the_file(tmp_path: Path):
    root = _write_ids(tmp_path / "d")
    victim = root / "train-00002-of-00003.tfrecord"
    offsets = _record_offsets(victim)
    cut = offsets[20] + 5  # inside the 12-byte header of record 21
    data = victim.read_bytes()
    victim.write_bytes(data[:cut])
    # TensorFlow on its own reads 20 records and says nothing.
    assert sum(1 for _ in tf.data.TFRecordDataset(str(victim))) == 20
    with pytest.raises(ConfigError, match=str(victim)) as caught:
        kdist.data.tfrecord(path=str(root))
    assert "truncated" in str(caught.value) and "integrity=tolerant" in str(caught.value)
    # Without sizes in the manifest, the record count check catches it while reading.
    records = checked_records([str(victim)], [30])
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{victim}.*read 20 of the 30"):
        for _ in records:
            pass


def test_tolerant_mode_counts_dropped_records_and_has_a_threshold(tmp_path: Path):
    root = _write_ids(tmp_path / "d")
    victim = root / "train-00000-of-00003.tfrecord"
    offsets = _record_offsets(victim)
    data = bytearray(victim.read_bytes())
    data[offsets[25] + 20] ^= 0xFF  # inside record 26's payload: records 26..30 are lost
    victim.write_bytes(bytes(data))
    assert scan_file(str(victim))[0] == 25
    source = kdist.data.tfrecord(path=str(root), integrity="tolerant", max_dropped_fraction=0.1)
    assert source.dropped == {str(victim): 5}
    assert source.size("train") == 85
    ids = sorted(int(x.numpy()[0]) for x, _ in source.dataset("train"))
    assert ids == [i for i in range(90) if not 25 <= i < 30]
    with pytest.raises(ConfigError, match=rf"{victim} \(5\).*5 of the 90 train records"):
        kdist.data.tfrecord(path=str(root), integrity="tolerant", max_dropped_fraction=0.05)
    # integrity=off is TensorFlow's own behaviour: a DataLossError without the file name.
    plain = kdist.data.tfrecord(path=str(root), integrity="off")
    with pytest.raises(tf.errors.DataLossError):
        for _ in plain.dataset("train"):
            pass


def test_manifest_and_file_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"data\.source\.path.*no manifest\.json"):
        (tmp_path / "empty").mkdir()
        kdist.data.tfrecord(path=str(tmp_path / "empty"))
    root = _write_ids(tmp_path / "d")
    (root / "train-00001-of-00003.tfrecord").unlink()
    with pytest.raises(ConfigError, match=r"train-00001-of-00003\.tfrecord: is missing"):
        kdist.data.tfrecord(path=str(root))
    (root / "manifest.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"manifest\.json: is not valid JSON"):
        kdist.data.tfrecord(path=str(root))


def test_write_manifest_for_foreign_files(tmp_path: Path):
    folder = tmp_path / "foreign"
    folder.mkdir()
    for i, count in enumerate((7, 5)):
        with tf.io.TFRecordWriter(str(folder / f"part{i}.rec")) as writer:
            for j in range(count):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "pixels": tf.train.Feature(
                                float_list=tf.train.FloatList(value=[float(j), 1.0])
                            ),
                            "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[j % 2])),
                        }
                    )
                )
                writer.write(example.SerializeToString())
    features = {
        "pixels": {"shape": [2], "dtype": "float32"},
        "class": {"shape": [], "dtype": "int64"},
    }
    path = write_manifest(
        folder,
        {"train": "part*.rec"},
        features=features,
        feature_key="pixels",
        label_key="class",
        num_classes=2,
    )
    manifest = read_manifest(str(path))
    assert [s.records for s in manifest.splits["train"]] == [7, 5]
    # Records of one length: the manifest lets the reader read them whole.
    assert all(s.record_bytes and s.fingerprint for s in manifest.splits["train"])
    source = kdist.data.tfrecord(path=str(folder))
    assert source.size("train") == 12 and source.reads_whole(source.files)
    assert sorted(float(x.numpy()[0]) for x, _ in source.dataset("train")) == sorted(
        [float(j) for j in range(7)] + [float(j) for j in range(5)]
    )
    # A truncated file is refused (its size does not match its records).
    victim = folder / "part1.rec"
    victim.write_bytes(victim.read_bytes()[:-3])
    with pytest.raises(ConfigError, match=r"part1\.rec: is corrupt or truncated"):
        write_manifest(
            folder,
            {"train": "part*.rec"},
            features=features,
            feature_key="pixels",
            label_key="class",
            num_classes=2,
        )


def _pipeline_ids(source, data_cfg, pipeline: int, pipelines: int = 2) -> list[int]:
    fn = make_dataset_fn(source, "train", data_cfg, global_batch_size=4, seed=0)
    context = tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=pipeline, num_replicas_in_sync=pipelines
    )
    share = source.count("train", list(source.files)[pipeline::pipelines])
    ids: list[int] = []
    for x, _ in fn(context):  # batches of 4 // 2 = 2 per replica
        ids.extend(int(v) for v in x.numpy()[:, 0])
        if len(ids) >= share:
            break
    return ids[:share]


def test_three_files_two_workers_shard_by_file(tmp_path: Path):
    root = _write_ids(tmp_path / "d", train=90, shards=3)
    source = kdist.data.tfrecord(path=str(root))
    cfg = compose(["data=tfrecord", f"data.source.path={root}", "data.shard_policy=auto"])
    assert resolve_shard_policy("auto", source, 2, "train") == "file"
    assert resolve_shard_policy("auto", source, 2, "validation") == "data"
    first, second = _pipeline_ids(source, cfg.data, 0), _pipeline_ids(source, cfg.data, 1)
    # Pipeline 0 reads files 0 and 2 whole, pipeline 1 file 1: disjoint, covering everything.
    assert sorted(first) == [*range(0, 30), *range(60, 90)]
    assert sorted(second) == list(range(30, 60))
    assert not set(first) & set(second)
    assert sorted(first + second) == list(range(90))


def test_fewer_files_than_workers(tmp_path: Path):
    root = _write_ids(tmp_path / "d", train=40, shards=1)
    source = kdist.data.tfrecord(path=str(root))
    cfg = compose(["data=tfrecord", f"data.source.path={root}", "data.shard_policy=file"])
    fn = make_dataset_fn(source, "train", cfg.data, global_batch_size=4, seed=0)
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=0, num_replicas_in_sync=2
    )
    with pytest.raises(ConfigError, match=r"data\.shard_policy='file'.*1 file\(s\) for 2"):
        fn(context)
    # auto falls back to sharding by example: every example once over the two pipelines.
    assert resolve_shard_policy("auto", source, 2, "train") == "data"
    cfg.data.shard_policy = "auto"
    cfg.data.shuffle = False
    fn = make_dataset_fn(source, "train", cfg.data, global_batch_size=4, seed=0)
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2
        )
        seen += [int(v) for x, _ in fn(context).take(10) for v in x.numpy()[:, 0]]
    assert sorted(seen) == list(range(40))
    # An in-memory source cannot shard by file.
    memory = compose(["data.shard_policy=file", "trainer.verbose=0", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="file sharding needs a file-based source"):
        kdist.Experiment(memory).build_model()


# --- the checked read: order, resume, errors in files of several READ_BATCH blocks --------


def _write_sized(root: Path, sizes: list[int], **kwargs) -> list[Path]:
    """Files of `sizes` records whose ids run on from file to file; returns their paths.

    `write` splits as evenly as it can (larger files first): `sizes` must be such a split.
    """
    write(root, {"train": _ids(sum(sizes))}, num_shards=len(sizes), **kwargs)
    manifest = read_manifest(str(root / "manifest.json"))
    assert [s.records for s in manifest.splits["train"]] == sizes
    return [Path(s.path) for s in manifest.splits["train"]]


def _stream_ids(dataset, count: int) -> list[int]:
    ids: list[int] = []
    for x, *_ in dataset:
        ids.extend(int(v) for v in np.reshape(x.numpy(), (-1, x.shape[-1]))[:, 0])
        if len(ids) >= count:
            break
    return ids[:count]


def test_files_are_read_a_block_of_records_of_each_in_turn(tmp_path: Path):
    block = READ_BATCH
    sizes = [2 * block + 20, 2 * block + 19, 2 * block + 19]
    _write_sized(tmp_path / "d", sizes)
    starts = [0, sizes[0], sizes[0] + sizes[1]]
    source = kdist.data.tfrecord(path=str(tmp_path / "d"))
    ids = [int(x.numpy()[0]) for x, _ in source.dataset("train")]
    # Three files, at most four read at once: a block of each in turn, the short last
    # blocks at the end.
    expected = []
    for index in range(3):
        for file, start in enumerate(starts):
            expected += list(
                range(start + index * block, start + min(sizes[file], (index + 1) * block))
            )
    assert ids == expected
    # The same order on every read, with or without the checks.
    assert [int(x.numpy()[0]) for x, _ in source.dataset("train")] == ids
    off = kdist.data.tfrecord(path=str(tmp_path / "d"), integrity="off")
    assert sorted(int(x.numpy()[0]) for x, _ in off.dataset("train")) == list(range(sum(sizes)))


def test_a_resumed_stream_continues_exactly_where_it_stopped(tmp_path: Path):
    _write_sized(tmp_path / "d", [280] * 5)
    source = kdist.data.tfrecord(path=str(tmp_path / "d"))
    cfg = compose(["data=tfrecord", f"data.source.path={tmp_path / 'd'}", "data.cache=false"])
    cfg.data.shuffle_buffer = 500

    def stream(skip: int, count: int) -> list[int]:
        fn = make_dataset_fn(
            source, "train", cfg.data, global_batch_size=8, seed=3, skip_examples=skip
        )
        return _stream_ids(fn(tf.distribute.InputContext()), count)

    full = stream(0, 3200)  # more than two passes over the 1,400 examples
    assert sorted(full[:1400]) == list(range(1400)) and full[:1400] != list(range(1400))
    assert stream(0, 3200) == full  # the same seed, the same order
    for skip in (8, 1000, 1400 + 296):
        assert stream(skip, 800) == full[skip : skip + 800]


def test_a_corrupt_record_past_the_first_block_names_the_file(tmp_path: Path):
    (victim,) = _write_sized(tmp_path / "d", [READ_BATCH * 2 + 50])
    offsets = _record_offsets(victim)
    data = bytearray(victim.read_bytes())
    data[offsets[300] + 20] ^= 0xFF  # record 301's payload: 300 records are readable
    victim.write_bytes(bytes(data))
    # Record by record, TensorFlow's CRC stops the file at record 301.
    source = kdist.data.tfrecord(path=str(tmp_path / "d"), whole_file_max_mb=0)
    assert not source.reads_whole(source.files)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{victim}.*read 300 of the 562"):
        for _ in source.dataset("train"):
            pass
    # Read whole (the default for this file), its checksum fails before any record is used.
    whole = kdist.data.tfrecord(path=str(tmp_path / "d"))
    assert whole.reads_whole(whole.files)
    iterator = iter(whole.dataset("train"))
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=f"{victim}.* is corrupt or truncated: its {len(data)} bytes do not match the "
        "size and checksum of the 562 records",
    ):
        next(iterator)


def test_the_count_check_at_block_boundaries(tmp_path: Path):
    whole, other = _write_sized(tmp_path / "d", [READ_BATCH * 2] * 2)
    # Cut exactly after the first block: every batch read is full, the end comes early.
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(whole.read_bytes()[: _record_offsets(whole)[READ_BATCH]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{cut}.*read {READ_BATCH} of"):
        for _ in checked_records([str(other), str(cut)], [2 * READ_BATCH] * 2):
            pass
    # A file with more records than listed fails too, and one with exactly its count
    # (a multiple of the block) passes.
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{whole}.*of the {READ_BATCH + 7}"):
        for _ in checked_records([str(whole)], [READ_BATCH + 7]):
            pass
    assert sum(1 for _ in checked_records([str(whole)], [2 * READ_BATCH])) == 2 * READ_BATCH
    assert list(checked_records([], [])) == []


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_files_are_read_and_checked(tmp_path: Path, compression: str):
    files = _write_sized(tmp_path / "d", [READ_BATCH + 10] * 2, compression=compression)
    source = kdist.data.tfrecord(path=str(tmp_path / "d"))
    ids = sorted(int(x.numpy()[0]) for x, _ in source.dataset("train"))
    assert ids == list(range(2 * READ_BATCH + 20))
    # A cut compressed file reads short (or fails inside the decompressor): named either way.
    cut = tmp_path / f"cut.{compression.lower()}"
    data = files[0].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match=str(cut)):
        for _ in checked_records([str(cut)], [READ_BATCH + 10], compression=compression):
            pass


@pytest.mark.parametrize("integrity", ["strict", "tolerant", "off"])
def test_image_features_are_decoded_per_record(tmp_path: Path, integrity: str):
    folder = tmp_path / "png"
    folder.mkdir()
    images = np.random.default_rng(0).integers(0, 255, (6, 5, 4, 3)).astype(np.uint8)
    with tf.io.TFRecordWriter(str(folder / "train.rec")) as writer:
        for i, image in enumerate(images):
            png = tf.io.encode_png(image).numpy()
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    write_manifest(
        folder,
        {"train": "train.rec"},
        features={
            "image": {"shape": [5, 4, 3], "dtype": "uint8", "encoding": "image"},
            "label": {"shape": [], "dtype": "int64"},
        },
        feature_key="image",
        label_key="label",
        num_classes=2,
    )
    source = kdist.data.tfrecord(path=str(folder), integrity=integrity)
    read = list(source.dataset("train"))
    assert [int(y) for _, y in read] == [0, 1, 0, 1, 0, 1]
    for (x, _), image in zip(read, images, strict=True):
        np.testing.assert_allclose(x.numpy(), image / 255.0, rtol=1e-6)


# --- files read whole ---------------------------------------------------------------------


def test_the_manifest_says_which_files_can_be_read_whole(tmp_path: Path):
    _write_sized(tmp_path / "d", [40, 40])
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    for entry in manifest["splits"]["train"]:
        data = (tmp_path / "d" / entry["file"]).read_bytes()
        assert len(data) == entry["records"] * (entry["record_bytes"] + FRAME)
        assert len(bytes.fromhex(entry["fingerprint"])) == 8
    # Labels of 1 and 2 bytes (varints): records of two lengths, read record by record.
    x, _ = _ids(20)
    write(tmp_path / "mixed", {"train": (x, np.where(np.arange(20) < 10, 5, 300))})
    (entry,) = json.loads((tmp_path / "mixed" / "manifest.json").read_text())["splits"]["train"]
    assert "record_bytes" not in entry and "fingerprint" not in entry
    mixed = kdist.data.tfrecord(path=str(tmp_path / "mixed"))
    assert not mixed.reads_whole(mixed.files)
    assert sorted(int(y) for _, y in mixed.dataset("train")) == [5] * 10 + [300] * 10
    # Compressed files are read record by record.
    write(tmp_path / "gz", {"train": (x, np.zeros(20, int))}, compression="GZIP")
    (entry,) = json.loads((tmp_path / "gz" / "manifest.json").read_text())["splits"]["train"]
    assert "fingerprint" not in entry
    # A bad checksum in the manifest is refused when it is read.
    manifest["splits"]["train"][0]["fingerprint"] = "abc"
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="bad record_bytes or fingerprint"):
        kdist.data.tfrecord(path=str(tmp_path / "d"))


def test_whole_file_max_mb_chooses_the_reader(tmp_path: Path):
    _write_sized(tmp_path / "d", [40, 40])
    assert kdist.data.tfrecord(path=str(tmp_path / "d")).reads_whole([]) is False
    source = kdist.data.tfrecord(path=str(tmp_path / "d"))
    assert source.reads_whole(source.files)
    size = max(Path(f).stat().st_size for f in source.files)
    below = kdist.data.tfrecord(path=str(tmp_path / "d"), whole_file_max_mb=(size - 1) / 2**20)
    assert not below.reads_whole(below.files)
    for other in ("tolerant", "off"):
        assert not kdist.data.tfrecord(path=str(tmp_path / "d"), integrity=other).reads_whole(
            source.files
        )
    with pytest.raises(ConfigError, match=r"data\.source\.whole_file_max_mb.*at least 0"):
        kdist.data.tfrecord(path=str(tmp_path / "d"), whole_file_max_mb=-1)
    cfg = compose(["data=tfrecord", f"data.source.path={tmp_path / 'd'}"])
    assert cfg.data.source.whole_file_max_mb == 32


def _streams(whole, records) -> tuple[list, list]:
    """The `(features, label)` examples of both sources, in order."""
    assert whole.reads_whole(whole.files) and not records.reads_whole(records.files)
    return (
        [(x.numpy(), int(y)) for x, y in whole.dataset("train")],
        [(x.numpy(), int(y)) for x, y in records.dataset("train")],
    )


@pytest.mark.parametrize(
    "sizes",
    [
        [READ_BATCH + 30] * 5,  # four files in turn, then the fifth alone
        [2 * READ_BATCH + 1, 2 * READ_BATCH, 7, READ_BATCH + 3, 9, 2 * READ_BATCH],
    ],
)
def test_whole_files_give_the_records_of_the_record_reader(tmp_path: Path, sizes: list[int]):
    folder = tmp_path / "files"
    folder.mkdir()
    for index, (size, start) in enumerate(zip(sizes, np.cumsum([0, *sizes[:-1]]), strict=True)):
        written = write(tmp_path / f"part{index}", {"train": _ids(size, int(start))})
        (written.parent / "train-00000-of-00001.tfrecord").rename(folder / f"{index}.tfrecord")
    write_manifest(
        folder,
        {"train": "*.tfrecord"},
        features=json.loads(written.read_text())["features"],
        feature_key="x",
        label_key="y",
        num_classes=3,
    )
    whole, records = _streams(
        kdist.data.tfrecord(path=str(folder)),
        kdist.data.tfrecord(path=str(folder), whole_file_max_mb=0),
    )
    # The same examples, bit for bit.
    by_id = {int(x[0]): (x, y) for x, y in records}
    assert sorted(by_id) == list(range(sum(sizes))) and len(whole) == len(records)
    for x, y in whole:
        np.testing.assert_array_equal(x, by_id[int(x[0])][0])
        assert y == by_id[int(x[0])][1]
    ids = [int(x[0]) for x, _ in whole]
    # A block of each of the first four files in turn.
    starts = np.cumsum([0, *sizes[:-1]])
    first_round = [int(starts[f]) + i for f in range(4) for i in range(min(READ_BATCH, sizes[f]))]
    assert ids[: len(first_round)] == first_round
    if len(set(sizes)) == 1:
        # Files of one size: the same order. (With others, the record reader's empty
        # block after a file's last keeps the next file out for one more turn.)
        assert ids == [int(x[0]) for x, _ in records]


def test_a_file_changed_since_its_manifest_fails_before_its_records_are_used(tmp_path: Path):
    files = _write_sized(tmp_path / "d", [READ_BATCH + 5] * 2)
    victim = files[1]
    data = bytearray(victim.read_bytes())
    # A valid record of the first file in place of one of the second: the size and
    # every CRC still match, only the checksum of the whole file can tell.
    offsets = _record_offsets(victim)
    other = files[0].read_bytes()
    length = offsets[1] - offsets[0]
    data[offsets[3] : offsets[3] + length] = other[offsets[3] : offsets[3] + length]
    victim.write_bytes(bytes(data))
    assert sum(1 for _ in tf.data.TFRecordDataset(str(victim))) == READ_BATCH + 5
    source = kdist.data.tfrecord(path=str(tmp_path / "d"))
    assert source.reads_whole(source.files)
    seen = []
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{victim}.*corrupt or truncated"):
        for x, _ in source.dataset("train"):
            seen.append(int(x.numpy()[0]))
    # The first file's first block at most; nothing of the changed file.
    assert all(i < READ_BATCH + 5 for i in seen) and len(seen) <= READ_BATCH
