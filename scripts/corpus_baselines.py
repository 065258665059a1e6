"""What counting alone achieves on the natural held-out stories: unigram, Kneser-Ney bigram and trigram models
fitted on a run's training text with its tokenizer, beside the models' own loss, each with its 95% bootstrap
interval over held-out stories, and each model's gap below the trigram (paired by story).

    python scripts/corpus_baselines.py --models models/sgatlin-stories models/gelu-stories \
        --out results/baselines/natural.json

The training text and tokenizer are the first model's: its metrics.json records the data it was trained on
(re-read with circuitlab.training.corpus.load_document_sets) and its folder holds the tokenizer; every model
must share that tokenizer. `--natural-only` fits the baselines on the natural stories' training split alone.
A model folder with held_out_stories.npz (written by `circuitlab train --natural`) is paired from it; any
other is read story by story here. Letters in the table: loss in nats/token [95% interval].
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from circuitlab.analysis.ngram import BASELINES, NgramBaselines  # noqa: E402
from circuitlab.stats import bootstrap_difference, bootstrap_ratio  # noqa: E402
from circuitlab.training.evaluation import document_losses  # noqa: E402


def training_documents(model_folder: Path, natural_only: bool) -> tuple[list[str], str]:
    """The training documents of the run that made `model_folder` (or the natural training split alone)."""
    from circuitlab.data.natural import load_natural_stories
    from circuitlab.training.corpus import DataSpec, load_document_sets

    metrics = json.loads((model_folder / "metrics.json").read_text())
    spec = dict(metrics["data"]["spec"])
    natural = spec.get("natural_dir")
    if natural is not None and not Path(natural).is_dir():
        natural = str(ROOT / natural) if (ROOT / natural).is_dir() else None
    if natural_only or spec.get("source") != "stories":
        if natural is None:
            from circuitlab.resources import natural_root

            natural = str(natural_root())
        return [story.text for story in load_natural_stories(natural).train()], "the natural stories' training split"
    spec["natural_dir"] = natural
    spec = {key: value for key, value in spec.items() if key in DataSpec.model_fields}
    data = DataSpec(**spec)
    return load_document_sets(data, show_progress=True).train, data.describe().split("; validation")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", required=True, help="model folders (shipped names or paths)")
    parser.add_argument("--natural", default=None, help="natural stories folder (default: the shipped stories)")
    parser.add_argument("--natural-only", action="store_true", help="fit the baselines on the natural training split alone")
    parser.add_argument("--out", default=None, help="write the results (.json)")
    args = parser.parse_args(argv)

    from circuitlab import load_model
    from circuitlab.architectures.weights import resolve_model_folder
    from circuitlab.data.natural import load_natural_stories
    from circuitlab.resources import natural_root

    folders = [resolve_model_folder(name) for name in args.models]
    first = load_model(folders[0])
    tokenizer = first.tokenizer
    texts, described = training_documents(folders[0], args.natural_only)
    held = load_natural_stories(args.natural or natural_root()).held_out()
    held_ids = np.array([story.id for story in held])
    held_docs = tokenizer.encode_batch([story.text for story in held])
    baselines = NgramBaselines.fit(tokenizer.encode_batch(texts), tokenizer.vocab_size, tokenizer.eos_id)
    losses = baselines.document_losses(held_docs)
    counts = losses["unigram"][1]
    result = {
        "training_text": described, "training_documents": len(texts), "training_tokens": baselines.n_tokens,
        "tokenizer_hash": tokenizer.hash(), "held_out_stories": len(held), "held_out_tokens": int(counts.sum()),
        "baselines": {}, "models": {},
    }
    for name in BASELINES:
        estimate = bootstrap_ratio(losses[name][0], counts)
        result["baselines"][name] = {"loss": estimate.value, "ci95": estimate.ci95}
    rows = [(name, result["baselines"][name], None) for name in BASELINES]
    for folder in folders:
        model = load_model(folder)
        if model.tokenizer.hash() != tokenizer.hash():
            raise SystemExit(f"{folder}: another tokenizer than {folders[0]}'s; the baselines are per tokenizer")
        saved = folder / "held_out_stories.npz"
        if saved.is_file() and np.array_equal(np.load(saved)["ids"], held_ids):
            nll = np.load(saved)["nll"]
        else:
            nll, _ = document_losses(model, held_docs, tokenizer.eos_id, progress=True)
        # paired by story: trigram loss minus the model's, resampling the same stories for both
        estimate, gap = bootstrap_ratio(nll, counts), bootstrap_difference(losses["trigram"][0], counts, nll, counts)
        result["models"][folder.name] = {"loss": estimate.value, "ci95": estimate.ci95,
                                         "below_trigram": gap.value, "below_trigram_ci95": gap.ci95}
        rows.append((folder.name, result["models"][folder.name], gap))
    print(f"natural held-out split: {len(held):,} stories, {int(counts.sum()):,} tokens; baselines fitted on "
          f"{described} ({baselines.n_tokens:,} tokens)")
    print(f"{'':<20} {'loss [95% interval]':<28} below the KN trigram [95% interval]")
    for name, entry, gap in rows:
        interval = f"{entry['loss']:.3f} [{entry['ci95'][0]:.3f}, {entry['ci95'][1]:.3f}]"
        print(f"{name:<20} {interval:<28} {'' if gap is None else gap.text()}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
