"""A database in shards: the same answers as in memory whatever the shard size, an open that reads only the
manifest, a damaged or missing shard named in a one-line error with every other shard still answering."""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from circuitlab.analysis.circuitdb import CircuitDB, CircuitDBError, CorruptDatabaseError, DamagedShardError
from circuitlab.analysis.circuitdb.manifest import MANIFEST
from circuitlab.analysis.codeindex import CodeMatrix, brute_force_search, structured_synthetic_codes
from circuitlab.errors import UserError

N_ROWS = 2000


def make_db(n_rows: int = N_ROWS) -> CircuitDB:
    codes = {layer: structured_synthetic_codes(n_rows, seed=11 + layer) for layer in (0, 3)}
    metadata = pd.DataFrame({
        "token": [f"t{i % 13}" for i in range(n_rows)],
        "context": [f"row {i}" for i in range(n_rows)],
        "category": [("NOUN", None)[i % 2] for i in range(n_rows)],
        "sequence_id": np.arange(n_rows) // 40,
        "position": np.arange(n_rows) % 40,
    })
    return CircuitDB.from_codes(codes, metadata)


def queries() -> CodeMatrix:
    return structured_synthetic_codes(12, seed=99, prototypes_seed=11)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The same database saved in one shard and in shards of 300 rows (the last one short)."""
    root = tmp_path_factory.mktemp("shards")
    db = make_db()
    return db, db.save(root / "one"), db.save(root / "many", shard_rows=300)


def test_shards_answer_as_the_database_in_memory(saved):
    db, one, many = saved
    manifest = json.loads((many / MANIFEST).read_text())
    assert manifest["shard_rows"] == [300] * 6 + [200] and "shard_rows" not in json.loads((one / MANIFEST).read_text())
    assert "s00006.layer3.values.npy" in manifest["files"] and "metadata.parquet" in manifest["files"]
    expected = db.search(queries(), 3, k=7)
    for folder in (one, many):
        opened = CircuitDB.open(folder)
        assert opened.shard_table.n_shards == (1 if folder == one else 7)
        hits = opened.search(queries(), 3, k=7, device="cpu")
        pd.testing.assert_frame_equal(hits, expected)
        assert hits.attrs["served_by"].startswith("cpu, exact")
        reference_ids, reference_distances = brute_force_search(db.codes[3], queries(), 7)
        np.testing.assert_array_equal(hits["circuit_id"].to_numpy().reshape(12, 7), reference_ids)
        np.testing.assert_allclose(hits["distance"].to_numpy().reshape(12, 7), reference_distances, atol=1e-12)
        ids = np.array([1999, 0, 299, 300, 1234])
        pd.testing.assert_frame_equal(opened.metadata_rows(ids), db.metadata.iloc[ids].reset_index(drop=True))
        np.testing.assert_array_equal(opened.code(0, ids).indices.numpy(), db.codes[0].rows(ids).indices)
        # the neighbours of stored circuits leave the circuits themselves out, across shard edges
        found, _ = opened.neighbours(0, [299, 300], k=4)
        assert 299 not in found[0] and 300 not in found[1]
    # saving a sharded database again keeps its shards; a new shard size re-cuts them
    resaved = CircuitDB.open(many).save(many.parent / "again")
    assert json.loads((resaved / MANIFEST).read_text())["shard_rows"] == [300] * 6 + [200]
    recut = CircuitDB.open(many).save(many.parent / "recut", shard_rows=1500)
    assert json.loads((recut / MANIFEST).read_text())["shard_rows"] == [1500, 500]
    pd.testing.assert_frame_equal(CircuitDB.open(recut).search(queries(), 3, k=7), expected)


def test_approximate_search_over_shards(saved):
    db, _, many = saved
    opened = CircuitDB.open(many)
    reports = opened.build_index(kind="flat", progress=False, n_recall_queries=50)
    assert reports[0]["recall_at_10"] >= 0.95
    exact = opened.search(queries(), 0, k=5)
    approximate = opened.search(queries(), 0, k=5, exact=False)
    assert approximate.attrs["served_by"].startswith("cpu, approximate, FAISS flat")
    assert (approximate["distance"].to_numpy() >= exact["distance"].to_numpy() - 1e-12).all()
    assert (approximate["rank"] == 1).sum() == 12


OPENED: list[str] | None = None  # file paths opened while a test records them (Python's "open" audit event)


def _record_opens(event: str, args: tuple) -> None:
    if event == "open" and OPENED is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_record_opens)  # audit hooks stay for the process: this one records only inside the test


def test_open_reads_only_the_manifest(saved):
    global OPENED
    _, _, many = saved
    OPENED = []
    try:
        db = CircuitDB.open(many)
    finally:
        opened, OPENED = OPENED, None
    inside = sorted({path for path in opened if path.startswith(str(many))})
    # the manifest, and the folder's lock to see whether an interrupted write left something behind
    assert inside == [str(many / ".save.lock"), str(many / MANIFEST)], inside
    assert len(db) == N_ROWS and db.layers == [0, 3] and db.shard_table._matrices == {}
    assert len(db.search(queries(), 0, k=3)) == 36


def damage_copy(many, tmp_path, name: str, how: str):
    import shutil

    folder = tmp_path / "db"
    shutil.copytree(many, folder)
    data = folder / json.loads((folder / MANIFEST).read_text())["data_dir"]
    victim = data / name
    if how == "delete":
        victim.unlink()
    elif how == "truncate":
        victim.write_bytes(victim.read_bytes()[:-40])
    else:
        raw = bytearray(victim.read_bytes())
        raw[-9] ^= 0xFF
        victim.write_bytes(bytes(raw))
    before = {p.name: p.read_bytes() for p in data.iterdir() if p.name != name}
    return folder, data / name, before


@pytest.mark.parametrize("how", ["delete", "truncate", "flip"])
def test_a_damaged_shard_is_named_and_the_others_still_answer(saved, tmp_path, how):
    db, _, many = saved
    folder, victim, before = damage_copy(many, tmp_path, "s00002.layer0.values.npy", how)
    with pytest.raises(DamagedShardError) as error:
        CircuitDB.open(folder).search(queries(), 0, k=5)
    message = str(error.value)
    assert isinstance(error.value, UserError) and isinstance(error.value, CorruptDatabaseError)
    assert "\n" not in message and str(victim) in message and "shard 2 (circuits 600..899)" in message
    assert "the other 6 shards are untouched" in message and "skip_damaged=True" in message
    assert error.value.shard == 2 and error.value.rows == (600, 900)
    if how != "flip":  # a missing or cut file is seen at open; a flipped byte when the shard is first read
        with pytest.raises(DamagedShardError):
            CircuitDB.open(folder)
    # nothing else is lost: every other file is byte for byte what it was, and the other shards answer
    data = victim.parent
    assert {p.name: p.read_bytes() for p in data.iterdir() if p.name != victim.name} == before
    with pytest.warns(UserWarning, match="set aside: .*s00002.layer0.values.npy"):
        partial = CircuitDB.open(folder, skip_damaged=True)
        ids, distances = partial.search_ids(queries(), 0, k=5)
    kept = np.setdiff1d(np.arange(N_ROWS), np.arange(600, 900))
    reference_ids, reference_distances = brute_force_search(db.codes[0].rows(kept), queries(), 5)
    np.testing.assert_array_equal(ids, kept[reference_ids])
    np.testing.assert_allclose(distances, reference_distances, atol=1e-12)
    with pytest.raises(CircuitDBError, match="shards \\[2\\] are damaged"):
        partial.metadata
    assert len(partial.search(queries(), 3, k=5)) == 60  # the layer whose files are whole answers in full


def test_a_damaged_shard_through_the_cli_is_one_line(saved, tmp_path, capsys):
    from circuitlab.cli import main

    _, _, many = saved
    folder, victim, _ = damage_copy(many, tmp_path, "s00004.metadata.parquet", "flip")
    assert main(["db", "query", str(folder), "--circuit", "1300", "-k", "3", "--layer", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(victim) in err[0] and "shard 4" in err[0], err
    assert main(["db", "query", str(folder), "--circuit", "5", "-k", "3", "--layer", "0", "--skip-damaged"]) == 0
    out = capsys.readouterr().out
    assert "served by cpu, exact" in out and out.count("«") == 3


def test_an_unverified_open_skips_the_hash_but_not_the_checks(saved, tmp_path):
    _, _, many = saved
    folder, victim, _ = damage_copy(many, tmp_path, "s00001.layer3.indices.npy", "flip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        db = CircuitDB.open(folder, verify=False)
        hits = db.search(queries(), 0, k=3)  # layer 0 never reads the damaged layer-3 file
    assert len(hits) == 36
    # the flip turned the top byte of the last int32 unit id negative: the range check names the file
    with pytest.raises(DamagedShardError, match="holds neuron ids outside \\[0, 8192\\)") as error:
        db.search(queries(), 3, k=3)
    assert str(victim) in str(error.value)
