"""Circuit database persistence: round trip, atomic save, refused loads."""

from __future__ import annotations

import json
import os
import types
import warnings

import numpy as np
import pandas as pd
import pytest
from filelock import FileLock

import circuitlab.analysis.circuitdb.store as dbstore_module
from circuitlab.analysis.circuitdb import (
    CircuitDB,
    CircuitDBError,
    CorruptDatabaseError,
    DatabaseMismatchError,
    sha256_file,
)
from circuitlab.analysis.codeindex import structured_synthetic_codes
from circuitlab.config import ModelConfig


class FakeTokenizer:
    def __init__(self, name: str) -> None:
        self.name = name

    def hash(self) -> str:
        return f"tokenizer-{self.name}".ljust(64, "0")


def make_db(seed: int, config_name: str = "tiny-sgatlin", n_rows: int = 1500) -> CircuitDB:
    codes = {layer: structured_synthetic_codes(n_rows, seed=seed + layer) for layer in (0, 1)}
    metadata = pd.DataFrame(
        {
            "token_id": np.arange(n_rows) % 7,
            "token": [f"t{i % 7}" for i in range(n_rows)],
            "category": [("NOUN", "VERB", None)[i % 3] for i in range(n_rows)],
            "context": [f"context of row {i}" for i in range(n_rows)],
            "token_start": 0,
            "token_end": 7,
            "top_predictions": [[f"p{i % 5}", "q", "r", "s", "u"] for i in range(n_rows)],
        }
    )
    db = CircuitDB.from_codes(
        codes,
        metadata,
        model_config_hash=ModelConfig.preset(config_name).hash(),
        tokenizer_hash=FakeTokenizer("a").hash(),
        model_config=ModelConfig.preset(config_name).to_dict(),
    )
    db.build_index(progress=False, n_recall_queries=50)
    return db


def answers(db: CircuitDB, layer: int = 1) -> pd.DataFrame:
    query = structured_synthetic_codes(4, seed=99, prototypes_seed=1).to_sparse_code()
    return db.search(query, layer, k=5)[["query_position", "rank", "distance", "circuit_id", "token", "context"]]


def fake_model(config_name: str, tokenizer_name: str = "a"):
    return types.SimpleNamespace(config=ModelConfig.preset(config_name), tokenizer=FakeTokenizer(tokenizer_name))


def test_save_load_round_trip(tmp_path):
    db = make_db(0)
    folder = db.save(tmp_path / "db")
    manifest = json.loads((folder / "manifest.json").read_text())
    data_dir = folder / manifest["data_dir"]
    # a FAISS index is saved as a file; posting lists (the default with numba) are rebuilt from the codes
    parts = ("indices.npy", "values.npy") + (("sketch.faiss",) if db.indexes[0].has_file else ())
    expected_files = {"metadata.parquet"} | {f"layer{layer}.{part}" for layer in (0, 1) for part in parts}
    assert set(manifest["files"]) == expected_files
    for name, record in manifest["files"].items():
        assert record["sha256"] == sha256_file(data_dir / name)
    assert manifest["n_circuits"] == 1500 and manifest["layers"] == [0, 1]
    assert manifest["layer_info"]["1"]["index"]["recall_at_10"] >= 0.9
    loaded = CircuitDB.load(folder)
    pd.testing.assert_frame_equal(answers(loaded), answers(db))
    pd.testing.assert_frame_equal(
        loaded.search(db.code(0, [3]), 0, k=5, exact=False)[["circuit_id", "distance"]],
        db.search(db.code(0, [3]), 0, k=5, exact=False)[["circuit_id", "distance"]],
    )
    assert loaded.metadata["category"].isna().sum() == 500
    assert list(loaded.metadata["top_predictions"][6]) == ["p1", "q", "r", "s", "u"]
    # Saving again over the same folder (the loaded arrays are memory maps of the old data folder).
    loaded.save(folder)
    assert len([p for p in folder.iterdir() if p.name.startswith("data-")]) == 1
    pd.testing.assert_frame_equal(answers(CircuitDB.load(folder)), answers(db))


def test_postings_index_round_trip_rebuilds_from_the_codes(tmp_path):
    pytest.importorskip("numba")
    pytest.importorskip("faiss")
    db = make_db(0)
    db.build_index([0], kind="flat", progress=False, n_recall_queries=50)  # a FAISS index beside the postings
    db.build_index([1], kind="postings", progress=False, n_recall_queries=50, terms=20, candidates=64)
    folder = db.save(tmp_path / "db")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "layer1.sketch.faiss" not in manifest["files"] and "layer0.sketch.faiss" in manifest["files"]
    assert manifest["layer_info"]["1"]["index"]["kind"] == "postings"
    assert manifest["layer_info"]["1"]["index"]["params"] == {"terms": 20, "candidates": 64}
    loaded = CircuitDB.load(folder)
    assert loaded.indexes[1].kind == "postings" and loaded.indexes[1].params == {"terms": 20, "candidates": 64}
    query = db.code(1, [3, 40])
    pd.testing.assert_frame_equal(
        loaded.search(query, 1, k=5, exact=False)[["circuit_id", "distance"]],
        db.search(query, 1, k=5, exact=False)[["circuit_id", "distance"]],
    )
    pd.testing.assert_frame_equal(answers(loaded), answers(db))


def test_crash_mid_save_leaves_previous_database_readable(tmp_path, monkeypatch):
    folder = tmp_path / "db"
    old = make_db(0)
    old.save(folder)
    new = make_db(7)
    assert not answers(new).equals(answers(old))

    real_save_array = dbstore_module._save_array
    calls = []

    def crash_on_third_array(path, array):
        calls.append(path)
        if len(calls) == 3:
            with open(path, "wb") as handle:  # half a file, then the process "dies"
                handle.write(b"\x93NUMPY partial")
            raise KeyboardInterrupt("simulated crash")
        real_save_array(path, array)

    monkeypatch.setattr(dbstore_module, "_save_array", crash_on_third_array)
    with pytest.raises(KeyboardInterrupt):
        new.save(folder)
    monkeypatch.setattr(dbstore_module, "_save_array", real_save_array)
    # The folder lock (filelock) is released with the failed save: the next load may clean up.
    with FileLock(folder / dbstore_module.LOCK, timeout=0):
        pass
    data_dirs = sorted(p.name for p in folder.iterdir() if p.name.startswith("data-"))
    assert len(data_dirs) == 2  # the committed one and the partial one

    with pytest.warns(UserWarning, match="interrupted save"):
        survivor = CircuitDB.load(folder)
    pd.testing.assert_frame_equal(answers(survivor), answers(old))
    assert len([p for p in folder.iterdir() if p.name.startswith("data-")]) == 1  # partial folder cleaned

    # A crash after the data is written but before the manifest is replaced: still the old database.
    def crash(*args):
        raise KeyboardInterrupt("simulated crash at the commit point")

    monkeypatch.setattr(dbstore_module.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        new.save(folder)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pd.testing.assert_frame_equal(answers(CircuitDB.load(folder)), answers(old))

    new.save(folder)  # the next save succeeds and replaces the database
    pd.testing.assert_frame_equal(answers(CircuitDB.load(folder)), answers(new))
    assert len([p for p in folder.iterdir() if p.name.startswith("data-")]) == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_corrupted_file_is_named(tmp_path, damage):
    folder = make_db(0).save(tmp_path / "db")
    manifest = json.loads((folder / "manifest.json").read_text())
    victim = folder / manifest["data_dir"] / "layer1.values.npy"
    if damage == "flip":
        data = bytearray(victim.read_bytes())
        data[-5] ^= 0xFF
        victim.write_bytes(bytes(data))
    elif damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-16])
    else:
        victim.unlink()
    with pytest.raises(CorruptDatabaseError, match="layer1.values.npy"):
        CircuitDB.load(folder)
    if damage == "flip":  # without verification the size check passes and the flipped byte goes unseen
        CircuitDB.load(folder, verify=False)


def test_broken_or_missing_manifest(tmp_path):
    folder = make_db(0).save(tmp_path / "db")
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptDatabaseError, match="manifest.json"):
        CircuitDB.load(folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(CorruptDatabaseError, match="manifest.json not found.*never finished"):
        CircuitDB.load(folder)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        CircuitDB.load(tmp_path / "nowhere")


def test_a_manifest_that_breaks_its_format_is_named_with_the_format(tmp_path):
    folder = make_db(0).save(tmp_path / "db")
    manifest = json.loads((folder / "manifest.json").read_text())
    for change, problem in (
        ({"surprise": 1}, "surprise"),
        ({"layer_info": {**manifest["layer_info"], "1": {**manifest["layer_info"]["1"], "code_size": "big"}}}, "layer_info.1.code_size"),
        ({"files": {**manifest["files"], "../elsewhere": {"sha256": "0", "bytes": 1}}}, "outside the database folder"),
    ):
        (folder / "manifest.json").write_text(json.dumps({**manifest, **change}))
        with pytest.raises(CorruptDatabaseError, match=r"circuitlab.circuitdb version 1 manifest \(.*" + problem):
            CircuitDB.load(folder)
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format_version": 2}))
    with pytest.raises(CircuitDBError, match="format version 2, this circuitlab reads version 1"):
        CircuitDB.load(folder)


def test_load_refuses_another_model_or_tokenizer(tmp_path):
    folder = make_db(0, "tiny-sgatlin").save(tmp_path / "db")
    CircuitDB.load(folder, model=fake_model("tiny-sgatlin"))
    with pytest.raises(DatabaseMismatchError, match="model config hash"):
        CircuitDB.load(folder, model=fake_model("tiny-gelu"))
    with pytest.raises(DatabaseMismatchError, match="tokenizer hash"):
        CircuitDB.load(folder, model=fake_model("tiny-sgatlin", tokenizer_name="b"))
    with pytest.raises(DatabaseMismatchError, match="tokenizer hash"):
        CircuitDB.load(folder, tokenizer=FakeTokenizer("b"))
    with pytest.warns(UserWarning, match="model config hash"):
        db = CircuitDB.load(folder, model=fake_model("tiny-gelu"), allow_mismatch=True)
    assert len(db) == 1500


def test_save_refuses_a_folder_of_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("precious")
    with pytest.raises(CircuitDBError, match="notes.txt"):
        make_db(0).save(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "precious"


def test_float16_values_halve_the_code_files(tmp_path):
    codes = structured_synthetic_codes(1000, seed=1)
    wide = CircuitDB.from_codes({0: codes}).save(tmp_path / "wide")
    narrow_db = CircuitDB.from_codes({0: codes.to_sparse_code()}, value_dtype="float16")
    narrow = narrow_db.save(tmp_path / "narrow")

    def values_bytes(folder):
        manifest = json.loads((folder / "manifest.json").read_text())
        return manifest["files"]["layer0.values.npy"]["bytes"]

    assert values_bytes(narrow) - 128 == pytest.approx((values_bytes(wide) - 128) / 2, abs=64)
    loaded = CircuitDB.load(narrow)
    assert loaded.codes[0].values.dtype == np.float16
    # float16 rounding moves distances by well under 1e-3.
    query = codes.rows([0, 1, 2]).to_sparse_code()
    np.testing.assert_allclose(
        loaded.search(query, 0, k=5)["distance"], CircuitDB.from_codes({0: codes}).search(query, 0, k=5)["distance"],
        atol=1e-3,
    )
    assert os.path.exists(narrow / "manifest.json")
