"""Issue 8, circuit database faults: a save or a `circuitlab db build` killed with SIGKILL at any stage leaves a
folder that loads and answers queries (the previous database, or the new one once its manifest is committed),
and the half-written data is detected and removed; damaged Parquet, FAISS and array files are errors that name
the file, through the API and the CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from filelock import FileLock, Timeout

from circuitlab.analysis.circuitdb import LOCK, CircuitDB, CorruptDatabaseError, sha256_file
from circuitlab.analysis.codeindex import structured_synthetic_codes

TESTS = Path(__file__).resolve().parent
N_ROWS = 1200


def synthetic_db(seed: int) -> CircuitDB:
    """Two layers of structured codes with metadata and a flat FAISS index per layer."""
    codes = {layer: structured_synthetic_codes(N_ROWS, seed=seed + layer) for layer in (0, 1)}
    metadata = pd.DataFrame({
        "token": [f"t{(i + seed) % 11}" for i in range(N_ROWS)],
        "context": [f"row {i} of database {seed}" for i in range(N_ROWS)],
        "category": [("NOUN", "VERB", None)[i % 3] for i in range(N_ROWS)],
    })
    db = CircuitDB.from_codes(codes, metadata)
    db.build_index(kind="flat", progress=False, n_recall_queries=20)
    return db


def answers(db: CircuitDB) -> pd.DataFrame:
    """Exact and approximate neighbours of a fixed set of queries in both layers."""
    queries = structured_synthetic_codes(3, seed=99, prototypes_seed=1).to_sparse_code()
    tables = [db.search(queries, layer, k=5, exact=exact)[["query_position", "rank", "distance", "circuit_id", "context"]]
              for layer in (0, 1) for exact in (True, False)]
    return pd.concat(tables, ignore_index=True)


def lock_is_free(folder: Path) -> bool:
    try:
        with FileLock(folder / LOCK, timeout=0):
            return True
    except Timeout:
        return False


def data_folders(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("data-"))


def load_quietly(folder: Path, **options) -> tuple[CircuitDB, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = CircuitDB.load(folder, **options)
    return db, [str(w.message) for w in caught]


@pytest.fixture(scope="module")
def old_and_new(tmp_path_factory):
    """A saved database (seed 0) and the answers of it and of its replacement (seed 7)."""
    root = tmp_path_factory.mktemp("circuitdb_faults")
    old = synthetic_db(0)
    old.save(root / "original")
    new_answers = answers(synthetic_db(7))
    old_answers = answers(old)
    assert not new_answers.equals(old_answers)
    return root / "original", old_answers, new_answers


# A save in another process, killed with SIGKILL (no finally, no atexit, no lock release) at one stage.
SAVER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    sys.path[:0] = [{tests!r}, {tests!r} + "/.."]
    import circuitlab.analysis.circuitdb.store as circuitdb
    from test_faults_circuitdb import synthetic_db

    point, folder = {point!r}, Path({folder!r})
    db = synthetic_db(7)

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "mid-data":
        real_save_array, calls = circuitdb._save_array, []

        def dying_save_array(path, array):
            calls.append(path)
            if len(calls) == 3:
                with open(path, "wb") as handle:
                    handle.write(b"\\x93NUMPY half an array")
                die()
            real_save_array(path, array)

        circuitdb._save_array = dying_save_array
    elif point == "before-commit":
        real_replace = os.replace

        def dying_replace(source, target):
            if Path(target).name == "manifest.json":
                die()
            real_replace(source, target)

        os.replace = dying_replace
    elif point == "after-commit":
        real_remove = circuitdb.remove_leftovers

        def dying_remove(where, keep, announce=True):
            if not announce:  # the clean-up of the superseded data folder, right after the commit
                die()
            return real_remove(where, keep, announce)

        circuitdb.remove_leftovers = dying_remove
    db.save(folder)
    """
)


@pytest.mark.parametrize("point, survivor", [("mid-data", "old"), ("before-commit", "old"), ("after-commit", "new")])
def test_a_save_killed_with_sigkill_leaves_a_database_that_answers(tmp_path, old_and_new, point, survivor):
    original, old_answers, new_answers = old_and_new
    folder = tmp_path / "db"
    shutil.copytree(original, folder)
    script = tmp_path / "saver.py"
    script.write_text(SAVER.format(tests=str(TESTS), point=point, folder=str(folder)))
    victim = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-2000:]
    left_behind = data_folders(folder)
    assert (folder / LOCK).exists() and lock_is_free(folder)  # the kernel released the dead saver's lock

    db, messages = load_quietly(folder)
    pd.testing.assert_frame_equal(answers(db), old_answers if survivor == "old" else new_answers)
    assert len(left_behind) == 2  # the committed data folder and the other one
    assert any("removed leftovers of an interrupted save" in m for m in messages), messages
    assert data_folders(folder) == [json.loads((folder / "manifest.json").read_text())["data_dir"]]
    assert not (folder / ".manifest.json.tmp").exists()

    del db  # the next save takes over the dead process's lock and replaces the database
    synthetic_db(7).save(folder)
    db, messages = load_quietly(folder)
    pd.testing.assert_frame_equal(answers(db), new_answers)
    assert messages == [] and len(data_folders(folder)) == 1 and lock_is_free(folder)


BUILDER = textwrap.dedent(
    """
    import os, signal, sys
    import circuitlab.analysis.circuitdb.store as circuitdb
    from circuitlab.cli import main

    real_save_array, calls = circuitdb._save_array, []

    def dying_save_array(path, array):
        calls.append(path)
        if len(calls) == 2:  # layer 0 written, layer 1 begun
            with open(path, "wb") as handle:
                handle.write(b"\\x93NUMPY half")
            os.kill(os.getpid(), signal.SIGKILL)
        real_save_array(path, array)

    circuitdb._save_array = dying_save_array
    sys.exit(main(sys.argv[1:]))
    """
)


def test_circuitlab_db_build_killed_mid_write_keeps_the_previous_database(tmp_path, capsys):
    from circuitdb_fixtures import tiny_model

    from circuitlab.cli import main

    tiny_model("tiny-sgatlin").save(tmp_path / "model")
    folder = tmp_path / "db"
    build = ["db", "build", "--model", str(tmp_path / "model"), "--out", str(folder), "--index", "flat", "--quiet"]
    assert main([*build, "--stories", "3"]) == 0
    n_before = len(CircuitDB.load(folder))
    capsys.readouterr()
    queries = ["db", "query", str(folder), "--circuit", "0", "7", "--layer", "1", "-k", "4"]
    assert main(queries) == 0
    table_before = capsys.readouterr().out

    script = tmp_path / "builder.py"
    script.write_text(BUILDER)
    victim = subprocess.run([sys.executable, str(script), *build, "--stories", "6"], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-2000:]
    left_behind = data_folders(folder)

    with pytest.warns(UserWarning, match="interrupted save"):
        assert main(["db", "info", str(folder)]) == 0  # loads, verifies every checksum, removes the half folder
    assert f"  {n_before} circuits (tokens)" in capsys.readouterr().out
    assert main(queries) == 0
    assert capsys.readouterr().out == table_before  # the same answers as before the killed build
    assert len(left_behind) == 2 and len(data_folders(folder)) == 1

    assert main([*build, "--stories", "6"]) == 0  # building again completes, over the dead build's lock
    assert len(CircuitDB.load(folder)) > n_before and lock_is_free(folder)


# ------------------------------------------------------------------------------------- damaged files

FILES = ["metadata.parquet", "layer1.sketch.faiss", "layer0.indices.npy", "layer1.values.npy"]


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        data = data[: len(data) // 2]
    elif how == "flip":
        for offset in range(len(data) // 3, len(data) // 3 + 32):
            data[offset] ^= 0xFF
    elif how == "garbage":
        data = bytearray(np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes())
    elif how == "header":
        data[:16] = b"\x00" * 16
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncate", "flip", "garbage"])
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_file_is_an_error_naming_it(tmp_path, old_and_new, name, how):
    folder = tmp_path / "db"
    shutil.copytree(old_and_new[0], folder)
    data_dir = folder / json.loads((folder / "manifest.json").read_text())["data_dir"]
    damage(data_dir / name, how)
    with pytest.raises(CorruptDatabaseError, match=name) as error:
        CircuitDB.load(folder)
    assert str(data_dir / name) in str(error.value) and "rebuild" in str(error.value)


@pytest.mark.parametrize(
    "name, how",
    [("metadata.parquet", "truncate"), ("metadata.parquet", "garbage"), ("metadata.parquet", "header"),
     ("metadata.parquet", "flip"), ("layer1.sketch.faiss", "truncate"), ("layer1.sketch.faiss", "garbage"),
     ("layer1.sketch.faiss", "header"), ("layer0.indices.npy", "truncate"), ("layer0.indices.npy", "header")],
)
def test_a_file_damaged_before_it_was_checksummed_is_still_an_error_naming_it(tmp_path, old_and_new, name, how):
    """The manifest agrees with the damaged file (damage before the save hashed it, or --no-verify): the
    parsers' own failures must still come out as CorruptDatabaseError naming the file, not a library error."""
    folder = tmp_path / "db"
    shutil.copytree(old_and_new[0], folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    path = folder / manifest["data_dir"] / name
    damage(path, how)
    manifest["files"][name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptDatabaseError, match=name):
        CircuitDB.load(folder, mmap=False)


def test_code_indices_out_of_range_are_found_at_load(tmp_path, old_and_new):
    folder = tmp_path / "db"
    shutil.copytree(old_and_new[0], folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    path = folder / manifest["data_dir"] / "layer0.indices.npy"
    indices = np.load(path)
    indices[5, 0] = -7  # a damaged entry that still parses
    np.save(path, indices)
    manifest["files"]["layer0.indices.npy"] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptDatabaseError, match="layer0.indices.npy"):
        db = CircuitDB.load(folder)
        answers(db)


def test_damaged_databases_through_the_cli_are_one_line_and_exit_2(tmp_path, old_and_new, capsys):
    from circuitlab.cli import main

    folder = tmp_path / "db"
    shutil.copytree(old_and_new[0], folder)
    data_dir = folder / json.loads((folder / "manifest.json").read_text())["data_dir"]
    damage(data_dir / "metadata.parquet", "flip")
    for argv in (["db", "info", str(folder)], ["db", "query", str(folder), "--circuit", "1"],
                 ["usage", str(folder)], ["db", "semantic", str(folder), "--queries", "10"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "metadata.parquet" in err[0] and "error" in err[0], (argv, err)
    (folder / "manifest.json").write_text('{"format": "circuitlab.circuitdb", "format_ver')
    assert main(["db", "info", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "manifest.json is not valid JSON" in err[0], err
