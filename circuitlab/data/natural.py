"""The natural stories of data/natural/: children's stories written for this project, one per prompt.

Each story was written to a prompt of data/natural/prompts.jsonl (one noun, one verb, one adjective and one
to three story features; scripts/story_prompts.py makes the prompts). Story files hold one or more stories:

    ### 17
    Once upon a time, ...

    ### 18
    ...

A header line `### <id>` names the prompt; the story runs to the next header (blank lines inside a story
separate its paragraphs). `load_natural_stories` parses a folder of such files, checks that every id is a
prompt id and that no id appears twice, and reports (without rejecting anything) the share of stories that
use their prompt's words in some inflection ("puppies" counts for "puppy", "ran" for "run").

The splits are a fixed function of the id (`split_of`): the sha256 of "natural-story/<id>" picks one of a
hundred buckets; the first `HELD_OUT_PERCENT` are the held-out split (the loss a card reports), the next
`VALIDATION_PERCENT` the validation split (the loss a run chooses its checkpoint on), the rest the training
split. Adding stories never moves an old one across a split.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from circuitlab.data._io import DataError, read_utf8
from circuitlab.data.morphology import inflections

HELD_OUT_PERCENT = 10
VALIDATION_PERCENT = 5
SPLITS = ("train", "validation", "held_out")
_HEADER = re.compile(r"^###[ \t]+(\S+)[ \t]*$")
_WORD = re.compile(r"[a-z]+")


def default_folder() -> Path:
    """The natural stories circuitlab ships (circuitlab.resources.natural_root: the installed package's copy, or
    data/natural of the source tree)."""
    from circuitlab.resources import natural_root

    return natural_root()


def split_of(story_id: int) -> str:
    """"held_out", "validation" or "train": the story's split, from its id alone (see the module docstring)."""
    digest = hashlib.sha256(f"natural-story/{story_id}".encode()).digest()
    bucket = int.from_bytes(digest[:8], "big") % 100
    if bucket < HELD_OUT_PERCENT:
        return "held_out"
    return "validation" if bucket < HELD_OUT_PERCENT + VALIDATION_PERCENT else "train"


def is_held_out(story_id: int) -> bool:
    return split_of(story_id) == "held_out"


@dataclass(frozen=True)
class NaturalStory:
    id: int
    text: str
    source: str  # "<file name>:<header line number>"


@dataclass
class NaturalCorpus:
    """Stories in id order, their prompts, and which prompt words each story uses."""

    stories: list[NaturalStory]
    prompts: dict[int, dict]
    uses_words: dict[int, dict[str, bool]] = field(default_factory=dict)  # id -> {"noun": bool, ...}

    def train(self) -> list[NaturalStory]:
        return self.split("train")

    def validation(self) -> list[NaturalStory]:
        return self.split("validation")

    def held_out(self) -> list[NaturalStory]:
        return self.split("held_out")

    def split(self, name: str) -> list[NaturalStory]:
        if name not in SPLITS:
            raise ValueError(f"no split {name!r}; the splits are {', '.join(SPLITS)}")
        return [story for story in self.stories if split_of(story.id) == name]

    def word_use_share(self) -> dict[str, float]:
        """Share of stories that use the prompt's noun, verb, adjective, and all three."""
        if not self.stories:
            return {"noun": 0.0, "verb": 0.0, "adjective": 0.0, "all": 0.0}
        n = len(self.stories)
        shares = {pos: sum(used[pos] for used in self.uses_words.values()) / n for pos in ("noun", "verb", "adjective")}
        shares["all"] = sum(all(used.values()) for used in self.uses_words.values()) / n
        return shares


def read_prompts(path: str | os.PathLike) -> dict[int, dict]:
    prompts: dict[int, dict] = {}
    for line_number, line in enumerate(read_utf8(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            prompt_id = int(record["id"])
            for key in ("noun", "verb", "adjective"):
                if not isinstance(record[key], str):
                    raise TypeError(f"{key} is not a string")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise DataError(f"{path}, line {line_number}: not a prompt with id, noun, verb and adjective ({error})") from None
        if prompt_id in prompts:
            raise DataError(f"{path}, line {line_number}: prompt id {prompt_id} appears twice")
        prompts[prompt_id] = record
    return prompts


def parse_story_file(path: str | os.PathLike) -> list[NaturalStory]:
    """The stories of one file, in file order (see the module docstring for the format)."""
    path = Path(path)
    stories: list[NaturalStory] = []
    current_id: int | None = None
    current_line = 0
    body: list[str] = []

    def close() -> None:
        if current_id is None:
            return
        text = "\n".join(body).strip()
        if not text:
            raise DataError(f"{path}, line {current_line}: story {current_id} is empty")
        stories.append(NaturalStory(current_id, text, f"{path.name}:{current_line}"))

    for line_number, line in enumerate(read_utf8(path).replace("\r\n", "\n").split("\n"), start=1):
        header = _HEADER.match(line)
        if header:
            close()
            try:
                current_id = int(header.group(1))
            except ValueError:
                raise DataError(f"{path}, line {line_number}: header {line!r} needs a numeric prompt id") from None
            current_line, body = line_number, []
        elif current_id is None:
            if line.strip():
                raise DataError(f"{path}, line {line_number}: text before the first '### <id>' header")
        else:
            body.append(line.rstrip())
    close()
    return stories


def prompt_words_used(text: str, prompt: dict) -> dict[str, bool]:
    """Whether `text` uses the prompt's noun, verb and adjective in some inflection (case-insensitive)."""
    words = set(_WORD.findall(text.lower()))
    return {pos: bool(words & set(inflections(prompt[pos].lower(), pos))) for pos in ("noun", "verb", "adjective")}


def load_natural_stories(
    folder: str | os.PathLike | None = None,
    prompts_path: str | os.PathLike | None = None,
    story_files: Sequence[str | os.PathLike] | None = None,
) -> NaturalCorpus:
    """Parse and check the stories under `folder`/stories/*.txt (default: the repository's data/natural).

    Raises DataError for a story id that is not a prompt id, an id given twice, or a story file that cannot be
    parsed; stories that leave out a prompt word are kept and counted (`NaturalCorpus.word_use_share`)."""
    folder = default_folder() if folder is None else Path(folder)
    prompts_path = folder / "prompts.jsonl" if prompts_path is None else Path(prompts_path)
    if not prompts_path.is_file():
        raise DataError(f"{prompts_path}: no prompts file (expected the prompts.jsonl the stories were written to)")
    prompts = read_prompts(prompts_path)
    if story_files is None:
        story_folder = folder / "stories"
        story_files = sorted(story_folder.glob("*.txt")) if story_folder.is_dir() else []
        if not story_files:
            raise DataError(f"{story_folder}: no story files (*.txt); the natural stories live in data/natural/stories/")
    seen: dict[int, str] = {}
    stories: list[NaturalStory] = []
    for path in story_files:
        for story in parse_story_file(path):
            if story.id not in prompts:
                raise DataError(f"{story.source}: story id {story.id} is not in {prompts_path.name}")
            if story.id in seen:
                raise DataError(f"{story.source}: story id {story.id} was already given at {seen[story.id]}")
            seen[story.id] = story.source
            stories.append(story)
    stories.sort(key=lambda story: story.id)
    uses = {story.id: prompt_words_used(story.text, prompts[story.id]) for story in stories}
    return NaturalCorpus(stories=stories, prompts=prompts, uses_words=uses)


def word_counts(texts: Sequence[str]) -> tuple[int, int]:
    """(word occurrences, distinct words) of texts, words being runs of letters with inner apostrophes,
    case-folded ("Lily's" is one word)."""
    total, distinct = 0, set()
    for text in texts:
        words = re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)*", text)
        total += len(words)
        distinct.update(word.lower() for word in words)
    return total, len(distinct)


def corpus_stats(corpus: NaturalCorpus) -> dict[str, float | int]:
    """Counts of the natural corpus and its split, as data/README.md states them."""
    train, validation, held = corpus.train(), corpus.validation(), corpus.held_out()
    words, distinct = word_counts([story.text for story in corpus.stories])
    train_words, _ = word_counts([story.text for story in train])
    validation_words, _ = word_counts([story.text for story in validation])
    held_words, _ = word_counts([story.text for story in held])
    shares = corpus.word_use_share()
    return {
        "stories": len(corpus.stories),
        "prompts": len(corpus.prompts),
        "words": words,
        "distinct_words": distinct,
        "train_stories": len(train),
        "train_words": train_words,
        "validation_stories": len(validation),
        "validation_words": validation_words,
        "held_out_stories": len(held),
        "held_out_words": held_words,
        "uses_noun": shares["noun"],
        "uses_verb": shares["verb"],
        "uses_adjective": shares["adjective"],
        "uses_all_three": shares["all"],
    }


SPAN = 12  # words a story may not share with another story
_SPAN_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")
_META_WORDS = ("noun", "verb", "adjective", "prompt", "foreshadowing", "foreshadow")
_SENTENCE_END = re.compile(r"(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<=[.!?])[\"'\u201d]?\s")


def _span_keys(text: str) -> list[int]:
    words = _SPAN_WORD.findall(text.lower())
    return [hash(tuple(words[i:i + SPAN])) for i in range(len(words) - SPAN + 1)]


def _opening_frame(text: str, prompt: dict) -> str:
    """The story's first sentence, case-folded, with the prompt's three words (any inflection) masked."""
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    words = _SPAN_WORD.findall(first.lower())
    masks = {}
    for pos in ("noun", "verb", "adjective"):
        for form in inflections(prompt[pos].lower(), pos):
            masks[form] = pos.upper()
    return " ".join(masks.get(word, word) for word in words)


def story_problems(folder: str | os.PathLike, files: Sequence[Path] | None = None) -> tuple[list[str], int]:
    """Problems of the stories in `files` (default: every story file of `folder`/stories), checked against
    the whole corpus (scripts/check_stories.py lists the rules). Returns (problem lines, stories checked)."""
    folder = Path(folder)
    prompts = read_prompts(folder / "prompts.jsonl")
    all_files = sorted((folder / "stories").glob("*.txt"))
    checked_files = {Path(f).resolve() for f in files} if files is not None else {f.resolve() for f in all_files}
    extra = [Path(f) for f in (files or []) if Path(f).resolve() not in {g.resolve() for g in all_files}]
    problems: list[str] = []
    stories: list[tuple[NaturalStory, bool]] = []
    seen: dict[int, str] = {}
    for path in [*all_files, *extra]:
        try:
            parsed = parse_story_file(path)
        except DataError as error:
            problems.append(str(error))
            continue
        for story in parsed:
            checked = path.resolve() in checked_files
            if story.id not in prompts:
                problems.append(f"{story.source}: story id {story.id} is not a prompt id")
                continue
            if story.id in seen:
                problems.append(f"{story.source}: story id {story.id} was already given at {seen[story.id]}")
                continue
            seen[story.id] = story.source
            stories.append((story, checked))
    # Every span of SPAN words, with the first story that has it.
    owner: dict[int, int] = {}
    shared: dict[int, set[int]] = {}
    frames: dict[str, list[int]] = {}
    for story, _ in stories:
        for key in set(_span_keys(story.text)):
            first = owner.setdefault(key, story.id)
            if first != story.id:
                shared.setdefault(story.id, set()).add(first)
                shared.setdefault(first, set()).add(story.id)
        frames.setdefault(_opening_frame(story.text, prompts[story.id]), []).append(story.id)
    n_checked = 0
    for story, checked in stories:
        if not checked:
            continue
        n_checked += 1
        prompt, where = prompts[story.id], story.source
        n_words = len(_SPAN_WORD.findall(story.text.lower()))
        low, high = 80, 500
        if "words" in prompt:
            low, high = max(low, prompt["words"] // 2), min(high, int(prompt["words"] * 1.6))
        if not low <= n_words <= high:
            problems.append(f"{where}: story {story.id} has {n_words} words; its prompt allows {low}-{high}")
        missing = [pos for pos, used in prompt_words_used(story.text, prompt).items() if not used]
        if missing:
            problems.append(f"{where}: story {story.id} leaves out its {', '.join(f'{pos} {prompt[pos]!r}' for pos in missing)}")
        if story.id in shared:
            others = sorted(shared[story.id])
            problems.append(f"{where}: story {story.id} shares a {SPAN}-word span with stories {others[:5]}")
        words = set(_SPAN_WORD.findall(story.text.lower()))
        meta = [word for word in _META_WORDS if word in words]
        if meta:
            problems.append(f"{where}: story {story.id} talks about its prompt ({', '.join(meta)})")
        frame = _opening_frame(story.text, prompt)
        is_template = any(pos.upper() in frame.split() for pos in ("noun", "verb", "adjective")) and len(frame.split()) >= 5
        if is_template and len(frames.get(frame, [])) > 1:
            others = [i for i in frames[frame] if i != story.id]
            problems.append(f"{where}: story {story.id} opens with the same frame as stories {others[:5]}: {frame!r}")
        if "dialogue" in prompt.get("features", []) and not re.search("[\"\u201c]", story.text):
            problems.append(f"{where}: story {story.id} was asked for dialogue and has no quoted speech")
        if re.search(r"^\s*(#|\*|title\s*:)", story.text, flags=re.IGNORECASE | re.MULTILINE):
            problems.append(f"{where}: story {story.id} carries markup (a title, '#' or '*')")
    return problems, n_checked
