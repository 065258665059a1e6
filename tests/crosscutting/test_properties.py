"""Issue 8, property-based tests (hypothesis) of everything a user types or feeds in: corpus files, text through
the tokenizer, fact lists through the fact-pair builder, argv through `circuitlab`, and the dashboard's text
boxes. The contract each time: a result that satisfies its invariants, or a clear error of the documented kind
(DataError / ValueError / exit status 2 with one line); never another exception, never a traceback."""

from __future__ import annotations

import argparse
import functools
import io
import json
import string
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from circuitlab.data import DataError, load_jsonl, load_text_files
from circuitlab.data.facts import FACTS, Fact, build_fact_pairs, single_token_id
from circuitlab.data.tokenizer import EOS_TOKEN

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
# characters Python's str.splitlines treats as line ends (documents are split on lines)
LINE_ENDS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
unicode_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80)


@functools.lru_cache(maxsize=None)
def story_tokenizer():
    from circuitlab.data.stories import generate_stories
    from circuitlab.data.tokenizer import train_tokenizer

    # 1200 tokens over 400 stories: most fact nouns and adjectives become single tokens
    return train_tokenizer([s.text for s in generate_stories(400, seed=5)], vocab_size=1200, show_progress=False)


# ---------------------------------------------------------------------------------------- corpus loading


def _non_space(text: str) -> str:
    return "".join(text.split())


@FEW
@given(data=st.binary(max_size=300) | unicode_text.map(lambda t: t.encode("utf-8")))
def test_text_files_give_documents_or_a_data_error(tmp_path, data):
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    for mode in ("blank_line", "line", "file"):
        try:
            documents = load_text_files(path, split_documents=mode)
        except DataError as error:
            assert "corpus.txt" in str(error) or "empty corpus" in str(error)
            continue
        assert documents and all(d == d.strip() and d for d in documents)
        # nothing but whitespace is lost, and nothing is invented
        assert _non_space("".join(documents)) == _non_space(data.decode("utf-8"))
        if mode == "blank_line":
            assert all(line.strip() for d in documents for line in d.split("\n"))


document_line = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=LINE_ENDS),
                        min_size=1, max_size=30).filter(str.strip)


@FEW
@given(documents=st.lists(st.lists(document_line, min_size=1, max_size=4).map("\n".join), min_size=1, max_size=6),
       line_end=st.sampled_from(["\n", "\r\n", "\r"]))
def test_documents_separated_by_blank_lines_come_back(tmp_path, documents, line_end):
    text = "\n\n".join(documents).replace("\n", line_end)
    (tmp_path / "corpus.txt").write_bytes(text.encode("utf-8"))
    assert load_text_files(tmp_path / "corpus.txt") == [d.strip() for d in documents]


@FEW
@given(texts=st.lists(unicode_text, min_size=1, max_size=8), field=st.sampled_from(["text", "body", "ünïcode"]))
def test_json_lines_round_trip_every_string(tmp_path, texts, field):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({field: t, "other": 1}) + "\n" for t in texts), encoding="utf-8")
    assert load_jsonl(path, text_field=field) == texts


json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | unicode_text,
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(unicode_text, inner, max_size=3),
                          max_leaves=6)


@FEW
@given(lines=st.lists(st.one_of(json_value.map(json.dumps), st.fixed_dictionaries({"text": json_value}).map(json.dumps),
                                st.binary(max_size=20).map(lambda b: b.decode("latin-1"))), max_size=5))
def test_json_lines_of_anything_give_documents_or_a_data_error(tmp_path, lines):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    try:
        documents = load_jsonl(path)
    except DataError as error:
        assert "corpus.jsonl" in str(error)
        return
    expected = [json.loads(line)["text"] for line in "\n".join(lines).splitlines() if line.strip()]
    assert documents == expected and all(isinstance(d, str) for d in documents)


# ------------------------------------------------------------------------------------------ tokenizer


@settings(max_examples=50, deadline=None)
@given(text=unicode_text | st.lists(st.sampled_from(["The", " turtle", EOS_TOKEN, "\u0301", "👩\u200d👧", "\x00", " "]),
                                    max_size=12).map("".join))
@example(text=f"a{EOS_TOKEN}b")
@example(text="e\u0301\u0301\u0301")
def test_tokenization_round_trips_with_valid_ids_and_offsets(text):
    tok = story_tokenizer()
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.encode_batch([text, text]) == [ids, ids]
    ids_again, offsets = tok.encode_with_offsets(text)
    assert ids_again == ids and len(offsets) == len(ids)
    assert all(0 <= start <= end <= len(text) for start, end in offsets)
    assert [start for start, _ in offsets] == sorted(start for start, _ in offsets)
    assert all(isinstance(tok.token_str(i), str) for i in ids)  # every token has a readable form


@settings(max_examples=30, deadline=None)
@given(ids=st.lists(st.integers(min_value=-5, max_value=1300), max_size=10))
def test_decoding_any_ids_gives_text_or_a_value_error(ids):
    tok = story_tokenizer()
    try:
        text = tok.decode(ids)
    except ValueError as error:
        assert any(not 0 <= i < tok.vocab_size for i in ids) and "outside the vocabulary" in str(error)
        return
    assert isinstance(text, str) and all(0 <= i < tok.vocab_size for i in ids)


# -------------------------------------------------------------------------------------- fact pairs

WORDS = sorted({f.noun for f in FACTS} | {f.adjective for f in FACTS})
# a few words drawn often (so lists repeat a noun or an adjective), all fact words, and anything else
word = st.one_of(st.sampled_from(["turtle", "slow", "fox", "clever"]), st.sampled_from(WORDS),
                 st.text(alphabet=string.ascii_letters + " '-é\u0301", max_size=8), unicode_text.map(lambda t: t[:10]))
facts = st.lists(st.builds(Fact, noun=word, adjective=word, label=st.sampled_from(["ANIMAL", "NOUN", "X"])), max_size=12)


@settings(max_examples=50, deadline=None)
@given(fact_list=facts, seed=st.integers(0, 2**16), n_pairs=st.none() | st.integers(-2, 40), prepend_eos=st.booleans())
def test_fact_pairs_from_any_fact_list_are_valid_or_a_value_error(fact_list, seed, n_pairs, prepend_eos):
    tok = story_tokenizer()
    try:
        pairs = build_fact_pairs(tok, fact_list, seed=seed, n_pairs=n_pairs, prepend_eos=prepend_eos)
    except ValueError as error:
        assert str(error)
        return
    nouns = {f.noun: f for f in fact_list}
    assert pairs and (n_pairs is None or len(pairs) == n_pairs)
    for pair in pairs:
        for side in ("clean", "patch"):
            tokens = getattr(pair, f"{side}_tokens")
            noun = getattr(pair, f"{side}_noun")
            noun_position = pair.noun_position if side == "clean" else pair.patch_noun_position
            final_position = pair.final_position if side == "clean" else pair.patch_final_position
            assert 0 <= noun_position < final_position == len(tokens) - 1
            assert tokens[noun_position] == single_token_id(tok, noun)
            assert (tokens[0] == tok.eos_id) == prepend_eos
            assert tok.decode(tokens[1 if prepend_eos else 0:]) == getattr(pair, f"{side}_prompt") == f"The {noun} was"
            answer_id = getattr(pair, f"{side}_answer_id")
            assert answer_id == single_token_id(tok, nouns[noun].adjective)
            assert getattr(pair, f"{side}_answer") == " " + nouns[noun].adjective
        assert pair.clean_noun != pair.patch_noun and pair.clean_answer_id != pair.patch_answer_id


# ------------------------------------------------------------------------------------------- the CLI


def _options_by_verb() -> dict[str, list[str]]:
    from circuitlab.cli import build_parser

    options: dict[str, list[str]] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}".strip())
            elif prefix:
                options.setdefault(prefix, []).extend(action.option_strings)

    walk(build_parser(), "")
    return options


OPTIONS = _options_by_verb()
VERBS = sorted(OPTIONS)
# verbs whose defaults mean minutes of work (20000 generated stories) get a small --n
SMALL = {"corpus": ["--n", "3"], "tokenizer": ["--n", "3"]}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A folder of odd inputs: an empty file, a non-UTF-8 one, a folder, a broken JSON, a bad config."""
    root = tmp_path_factory.mktemp("argv")
    (root / "empty.txt").write_bytes(b"")
    (root / "latin.txt").write_bytes("café".encode("latin-1"))
    (root / "folder").mkdir()
    (root / "broken.json").write_text("{not json")
    (root / "config.json").write_text(json.dumps({"d_vocab": 0}))
    (root / "models").mkdir()
    return root


def cli_token(root: Path):
    paths = [str(root / name) for name in ("empty.txt", "latin.txt", "folder", "broken.json", "config.json", "missing", "folder/x/y")]
    return st.one_of(
        st.sampled_from(sorted({o for opts in OPTIONS.values() for o in opts})),
        st.sampled_from(paths),
        st.integers(-3, 40).map(str),
        st.sampled_from(["0", "-1", "1e9", "nan", "inf", "all", "each", "final", "noun", "tiny-nothing", "", " ", "--", "-"]),
        # no line breaks: a message quoting such an argument spans lines however it is written
        st.text(alphabet=st.characters(blacklist_characters="\r\n"), max_size=12),
    )


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    import torch

    from circuitlab.cli import main

    threads = torch.get_num_threads()
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            try:
                status = main(argv)
            except SystemExit as exit_info:  # argparse: --help (0) or a usage error (2)
                status = exit_info.code if isinstance(exit_info.code, int) else 2
                assert status in (0, 2), (argv, status)
                return status, "", "argparse"
    finally:
        torch.set_num_threads(threads)
    return status, stdout.getvalue(), stderr.getvalue()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_argv_exits_0_or_2_with_one_line(sandbox, monkeypatch, data):
    import circuitlab.cli.demo

    monkeypatch.chdir(sandbox)
    monkeypatch.setenv("CIRCUITLAB_MODELS", str(sandbox / "models"))  # no shipped model can be picked up
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(circuitlab.cli.demo, "serve", lambda *args, **kwargs: 0)  # never start a server
    verb = data.draw(st.sampled_from(VERBS + [""]))
    own_options = st.sampled_from(OPTIONS.get(verb) or ["--help"])
    tokens = data.draw(st.lists(own_options | cli_token(sandbox), max_size=6))
    argv = [*verb.split(), *tokens, *SMALL.get(verb, [])]
    status, out, err = run_cli(argv)
    assert status in (0, 2), (argv, status, err[-1500:])
    if err != "argparse":
        assert "Traceback" not in err, (argv, err[-1500:])
        if status == 2 and not (err == "" and out.startswith("usage:")):  # `circuitlab db` alone prints its help
            lines = err.strip().split("\n")  # the lines a terminal shows
            errors = [line for line in lines if "error" in line.lower()]
            assert len(errors) == 1 and errors[0] == lines[-1], (argv, err[-1500:])


@pytest.fixture(scope="module")
def model_and_database(tmp_path_factory):
    """The dashboard tests' tiny sgatlin model folder and a small circuit database built from it."""
    from demo_fixtures import make_tiny_models

    from circuitlab.cli import main

    folder = make_tiny_models(tmp_path_factory.getbasetemp() / "circuitlab-demo" / "models")["tiny-sgatlin"]
    database = tmp_path_factory.mktemp("argv_db") / "db"
    assert main(["db", "build", "--model", str(folder), "--stories", "3", "--index", "flat", "--out", str(database), "--quiet"]) == 0
    return folder, database


# positionals that make each verb reach its real work; options and their values are drawn at random
DEEP_VERBS = {
    "summary": ["{model}"], "dla": ["{model}", "The turtle was"], "patch": ["{model}", "--n-pairs", "2"],
    "legibility": ["{model}"], "db info": ["{db}"], "db query": ["{db}", "Lily had a red ball."],
    "db semantic": ["{db}", "--queries", "20", "--shuffles", "2"], "usage": ["{db}"],
}
value = st.one_of(st.integers(-200, 200).map(str), st.sampled_from(["0", "1", "-1", "all", "each", "final", "noun", "nan",
                                                                  "1,2,3", "blocks.0.hook_resid_pre", "x.csv", "x.html"]),
                  st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=10))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_options_on_a_real_model_and_database_exit_0_or_2(model_and_database, tmp_path_factory, monkeypatch, data):
    folder, database = model_and_database
    monkeypatch.chdir(tmp_path_factory.mktemp("deep_argv"))  # files the options name land here
    verb = data.draw(st.sampled_from(sorted(DEEP_VERBS)))
    options = [o for o in OPTIONS[verb] if o not in ("-h", "--help", "--quiet")]
    tokens = data.draw(st.lists(st.tuples(st.sampled_from(options), value), max_size=3)) if options else []
    argv = [*verb.split(), *(a.format(model=folder, db=database) for a in DEEP_VERBS[verb]),
            *[part for pair in tokens for part in pair], *(["--quiet"] if "--quiet" in OPTIONS[verb] else [])]
    status, out, err = run_cli(argv)
    assert status in (0, 2), (argv, status, err[-1500:])
    if err != "argparse":
        assert "Traceback" not in err, (argv, err[-1500:])
        if status == 2:
            lines = err.strip().split("\n")
            assert sum("error" in line.lower() for line in lines) == 1 and "error" in lines[-1], (argv, err[-1500:])
        else:
            assert out.strip(), argv  # a result was printed


@pytest.mark.parametrize("option", [["--shuffles", "0"], ["--queries", "-1"]])
def test_semantic_scores_refuse_counts_below_one(model_and_database, option):
    _, database = model_and_database
    status, _, err = run_cli(["db", "semantic", str(database), *option])
    assert status == 2 and "Traceback" not in err and option[0] in err, err[-800:]


# ----------------------------------------------------------------------------------------- dashboard


@pytest.fixture(scope="module")
def tiny_sgatlin(tmp_path_factory):
    """The dashboard tests' tiny sgatlin model (random weights, a tokenizer with single-token facts)."""
    from demo_fixtures import make_tiny_models

    from circuitlab import load_model

    models = make_tiny_models(tmp_path_factory.getbasetemp() / "circuitlab-demo" / "models")
    return load_model(models["tiny-sgatlin"])


odd_input = st.one_of(unicode_text, st.none(), st.integers(), st.binary(max_size=8), st.lists(st.text(max_size=3), max_size=2),
                      st.sampled_from(["slow", "fast", " slow ", "The turtle was", "\x00", "🙂", EOS_TOKEN, "x" * 3000]))


@FEW
@given(clean=odd_input, patch=odd_input, clean_answer=odd_input, patch_answer=odd_input)
# facts whose words are single tokens under the dashboard tests' tokenizer (demo_fixtures)
@example(clean="The cheetah was", patch="The mouse was", clean_answer="fast", patch_answer="tiny")
@example(clean="The cheetah was", patch="The cheetah was", clean_answer="fast", patch_answer="tiny")
def test_patching_a_typed_pair_gives_a_table_or_a_message(tiny_sgatlin, clean, patch, clean_answer, patch_answer):
    """The patching page's whole path: custom_patch_pair, then run_custom_patch on what it accepted."""
    import math

    from circuitlab.demo import custom_patch_pair, run_custom_patch

    model = tiny_sgatlin
    pair, positions, message = custom_patch_pair(model, clean, patch, clean_answer, patch_answer)
    assert (pair is None) == (message is not None)
    if pair is None:
        assert isinstance(message, str) and message
        return
    assert len(pair.clean_tokens) <= model.config.n_ctx and len(pair.patch_tokens) <= model.config.n_ctx
    table, note = run_custom_patch(model, pair, positions)
    assert len(table) > 0 and {"m_clean", "m_patch", "nie"} <= set(table.columns)
    difference = abs(float(table["m_patch"].iloc[0]) - float(table["m_clean"].iloc[0]))
    if note is None:
        assert table["nie"].map(math.isfinite).all() and difference >= 0.5
    elif difference < 1e-9:
        assert "NIE is undefined" in note
    else:  # random weights tell most prompts apart by little: such pairs are flagged, their NIE still shown
        assert "below 0.5" in note and table["nie"].map(math.isfinite).all()


@FEW
@given(text=odd_input, what=st.sampled_from(["prompt", "clean prompt", "text"]), reserve=st.integers(0, 3))
def test_text_checks_turn_anything_into_ids_or_a_message(tiny_sgatlin, text, what, reserve):
    from circuitlab.demo import check_text, single_token

    checked = check_text(tiny_sgatlin, text, what, reserve=reserve)
    if checked.ok:
        assert isinstance(text, str) and 0 < len(checked.token_ids) <= tiny_sgatlin.config.n_ctx - reserve
        assert tiny_sgatlin.tokenizer.decode(checked.token_ids) == text
    else:
        assert what in checked.message and checked.token_ids is None
    token_id, message = single_token(tiny_sgatlin, text, "answer")
    assert (token_id is None) != (message is None)
    if token_id is not None:
        assert 0 <= token_id < tiny_sgatlin.config.d_vocab


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, tiny_sgatlin):
    from circuitlab.cli import main

    base = tmp_path_factory.getbasetemp() / "circuitlab-demo"
    status = main(["demo", str(base / "models" / "tiny-sgatlin"), "--runs", str(base / "runs"), "--fast", "--no-serve",
                   "--quiet"])
    assert status == 0
    return base / "runs" / "tiny-sgatlin"


PAGE_INPUTS = {"views/patching.py": 4, "views/attribution.py": 2, "views/lookup.py": 1}  # text boxes of each form


@pytest.mark.slow
@example(page="views/lookup.py", texts=["x" * 2500] * 4)
@example(page="views/attribution.py", texts=["x" * 2500, "", "", ""])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(page=st.sampled_from(sorted(PAGE_INPUTS)), texts=st.lists(unicode_text | st.sampled_from(["x" * 2500, EOS_TOKEN, ""]),
                                                                   min_size=4, max_size=4))
def test_dashboard_text_boxes_never_show_an_exception(demo_run, page, texts):
    """Typed text through the real pages (streamlit AppTest): a result or a warning, never an exception or an
    error box (an error box means a handler raised and the page's last line of defence caught it)."""
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "apps" / "app.py"), default_timeout=120)
    app.session_state["run_path"] = str(demo_run)
    app.run()
    app.switch_page(page)
    app.run()
    boxes = list(app.text_area) if page == "views/lookup.py" else list(app.text_input)
    assert len(boxes) == PAGE_INPUTS[page]
    for box, text in zip(boxes, texts):
        box.input(text)
    app.button[0].click()
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]
