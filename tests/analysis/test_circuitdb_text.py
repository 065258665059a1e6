"""CircuitDB built from a model: text queries, refused loads with another model or tokenizer, semantic score."""

from __future__ import annotations

import numpy as np
import pytest

from circuitdb_fixtures import stories, tiny_model, tokenizer
from circuitlab.analysis import postings
from circuitlab.analysis.circuitdb import CircuitDB, DatabaseMismatchError, format_hits, neighbour_heatmap
from circuitlab.analysis.codeindex import CodeMatrix, brute_force_search


@pytest.fixture(scope="module")
def built():
    model = tiny_model("tiny-sgatlin")
    db = CircuitDB.build(model, list(stories(12)), batch_size=8, progress=False)
    return model, db


def test_build_holds_every_token_and_an_index(built):
    model, db = built
    total = sum(len(model.tokenizer.encode(story.text)) for story in stories(12))
    assert len(db) == total and db.layers == [0, 1]
    assert db.model_config_hash == model.config.hash() and db.tokenizer_hash == model.tokenizer.hash()
    for layer in db.layers:
        report = db.index_reports[layer]
        # "auto" takes the postings index where numba is installed, FAISS (flat at this size) otherwise
        assert report["kind"] == ("postings" if postings.available() else "flat") and report["recall_at_10"] >= 0.95
    assert db.layer_layouts[1] == {"kind": "sgatlin", "n_channels": 2, "neurons_per_channel": 64, "keys_per_half": 8, "k": 4}


def test_text_query_of_a_stored_story_finds_itself(built):
    model, db = built
    story = stories(12)[3].text
    ids = model.tokenizer.encode(story)[: model.config.n_ctx]
    text = model.tokenizer.decode(ids)
    hits = db.search(text, layer=1, k=5)
    assert hits["query_position"].nunique() == len(ids)
    assert hits.groupby("query_position")["rank"].apply(list).map(lambda r: r == [1, 2, 3, 4, 5]).all()
    first = hits[hits["rank"] == 1]
    # Every token of a stored story meets its own circuit (or an identical one) at distance ~0.
    assert first["distance"].max() < 1e-5
    assert (first["token"].to_numpy() == np.array([model.tokenizer.token_str(i) for i in ids])).all()
    assert first["query_token"].tolist() == [model.tokenizer.token_str(i) for i in ids]
    # The neighbours are the brute-force neighbours of the model's own codes for this text.
    import torch

    with torch.inference_mode():
        _, cache = model.run_with_cache(torch.tensor([ids]))
    queries = CodeMatrix.from_sparse_code(model.sparse_codes(cache)[1])
    _, reference_distances = brute_force_search(db.codes[1], queries, 5)
    np.testing.assert_allclose(hits["distance"].to_numpy().reshape(len(ids), 5), reference_distances, atol=1e-6)
    approximate = db.search(text, layer=1, k=5, exact=False)
    assert (approximate[approximate["rank"] == 1]["distance"] < 1e-5).all()
    table = format_hits(hits[hits["query_position"] < 3])
    assert len(table.splitlines()) == 1 + 15
    figure = neighbour_heatmap(hits)
    assert np.array(figure.data[0].z).shape == (5, len(ids))


def test_new_text_gets_neighbours_with_context_and_predictions(built):
    _, db = built
    hits = db.search("Lily saw a big dog.", layer=0, k=3)
    assert len(hits) == 3 * hits["query_position"].nunique()
    assert hits["distance"].between(0, 2).all()
    for row in hits.itertuples():
        assert "«" in row.context and len(row.top_predictions.split(" | ")) == 5
        assert row.context_plain[row.token_start : row.token_end].strip() == row.token.strip()


def test_saved_database_refuses_another_model_or_tokenizer(built, tmp_path):
    model, db = built
    folder = db.save(tmp_path / "db")
    loaded = CircuitDB.load(folder, model=model)
    assert loaded.search("Tom was happy.", 1, k=2)["distance"].notna().all()
    with pytest.raises(DatabaseMismatchError, match="model config hash"):
        CircuitDB.load(folder, model=tiny_model("tiny-gelu"))
    other_tokenizer = tokenizer(other=True)
    with pytest.raises(DatabaseMismatchError, match="tokenizer hash"):
        CircuitDB.load(folder, model=tiny_model("tiny-sgatlin", tok=other_tokenizer))
    with pytest.warns(UserWarning):
        CircuitDB.load(folder, model=tiny_model("tiny-gelu"), allow_mismatch=True)
    # A model with the same architecture but other weights has the same config hash: codes differ, the
    # database cannot tell (the hash covers the configuration).
    CircuitDB.load(folder, model=tiny_model("tiny-sgatlin", seed=1))


@pytest.mark.parametrize("preset", ["tiny-gelu", "tiny-parity", "tiny-legible"])
def test_text_queries_on_every_architecture(preset):
    model = tiny_model(preset)
    db = CircuitDB.build(model, list(stories(4)), index=None, progress=False)
    text = stories(4)[0].text
    ids = model.tokenizer.encode(text)[: model.config.n_ctx]
    hits = db.search(model.tokenizer.decode(ids), layer=1, k=3)
    assert (hits[hits["rank"] == 1]["distance"] < 1e-5).all()


def test_semantic_score_of_a_model_database(built):
    _, db = built
    scores = db.semantic_scores(k=10, n_queries=300, n_shuffles=5)
    assert scores["layer"].tolist() == [0, 1]
    # Identical tokens have identical layer-0 inputs up to attention, so neighbours share labels far above
    # what label frequencies give even in a random model.
    assert (scores["score"] > scores["baseline"] + 0.1).all()
    assert ((scores["same_token_fraction"] >= 0) & (scores["same_token_fraction"] <= 1)).all()
