"""Write the generated parts of the documentation from the results they report, so prose and numbers cannot
drift apart:

- docs/generated/performance.md and BENCHMARKS.md: the benchmark results of record
  (benchmarks/results/current.json names each row's file and field);
- docs/generated/models.md and the README's `generated:models` block: the shipped models' card figures
  (models/*/metrics.json);
- each shipped model card's `generated:baselines` block (models/<name>/card.md): its natural held-out loss beside
  the counting baselines (results/baselines/natural.json, scripts/corpus_baselines.py) and its other seeds;
- the README's `generated:claims` block: what holds, what is contradicted and what these models are too small
  to test, from analyses/claims.json (written by scripts/claims.py);
- docs/figures/: the notebook figures the docs show (copied from analyses/figures/), and the shipped models'
  validation curves (docs/figures/validation_curves.png, drawn from their training logs; not part of --check,
  since a PNG's bytes depend on the browser that renders it).

    python scripts/docs_pages.py            # rewrite them
    python scripts/docs_pages.py --check    # exit 1 when any differs from a fresh rendering
"""

from __future__ import annotations

import argparse
import json
import operator
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GENERATED = ROOT / "docs" / "generated"
FIGURES = ["01_circuit_map.png", "03_usage_penultimate.png", "04_regimes_by_layer.png", "05_dla_overview.png",
           "07_ladder_loss_vs_flops.png", "07_ladder_isoflop_curves.png"]
SHIPPED = ["sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories"]
CHECKS = {">=": operator.ge, "<=": operator.le}


def field(data: object, path: str) -> object:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def performance_table() -> str:
    index = json.loads((RESULTS / "current.json").read_text())
    lines, group = [], None
    for row in index["rows"]:
        if row["group"] != group:
            group = row["group"]
            lines += ["", f"**{group}**", "", "| what | measured | target | met | result file | run |",
                      "| --- | ---: | --- | --- | --- | --- |"]
        result = json.loads((RESULTS / row["file"]).read_text())
        value = float(field(result, row["field"]))
        met = ""
        if "check" in row:
            sign, bound = row["check"][:2], float(row["check"][2:])
            met = "yes" if CHECKS[sign](value, bound) else "no"
        run = " ".join(str(result.get(key, "")) for key in ("date", "device") if result.get(key))
        lines.append(f"| {row['what']} | {row['format'].format(value)} | {row.get('target', '')} | {met} | "
                     f"`{row['file']}` | {run} |")
    return "\n".join(lines).strip() + "\n"


def _seed_metrics(name: str) -> list[dict]:
    """Every training seed's metrics of a shipped model (results/models/<name>/seed<N>/), seed 0 first; the
    shipped folder's alone when no seeds are kept."""
    folders = sorted((ROOT / "results" / "models" / name).glob("seed*/metrics.json"),
                     key=lambda path: int(path.parent.name.removeprefix("seed")))
    found = [json.loads(path.read_text()) for path in folders]
    return found or [json.loads((ROOT / "models" / name / "metrics.json").read_text())]


def _interval(entry: dict | None) -> str:
    if not entry:
        return "not measured"
    ci = entry.get("ci95")
    return f"{entry['loss']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def model_comparisons(spans: dict[str, tuple[float, float]]) -> list[str]:
    """For each pair of models: ordered when the union of their seeds' 95% intervals do not overlap, else
    indistinguishable at this scale."""
    lines = []
    names = sorted(spans, key=lambda name: sum(spans[name]))
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (a_low, a_high), (b_low, b_high) = spans[a], spans[b]
            if a_high < b_low:
                lines.append(f"`{a}` < `{b}`")
            elif b_high < a_low:
                lines.append(f"`{b}` < `{a}`")
            else:
                lines.append(f"`{a}` and `{b}` indistinguishable at this scale")
    return lines


def _cut_seeds(name: str) -> str:
    """'seed 0: 1,182 steps, ...' for the seeds of a model that its time budget stopped."""
    return ", ".join(f"seed {m.get('seed')}: {m['steps']:,} of {m.get('train_settings', {}).get('steps', m['steps']):,} steps"
                     for m in _seed_metrics(name) if m.get("stopped") == "time budget")


def _held_out_now() -> int:
    """Stories in the natural corpus's held-out split as committed now."""
    sys.path.insert(0, str(ROOT))
    from circuitlab.data import load_natural_stories

    return len(load_natural_stories().held_out())


def models_table() -> str:
    lines = ["| model | FFN | parameters | natural held-out loss, seed 0 [95% interval over stories] | "
             "seeds: mean (min-max) | below the KN trigram, seed 0 | generated held-out loss | passes | steps |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    baselines_path = ROOT / "results" / "baselines" / "natural.json"
    baselines = json.loads(baselines_path.read_text()) if baselines_path.is_file() else None
    spans: dict[str, tuple[float, float]] = {}
    reference_tokenizer = (ROOT / "models" / SHIPPED[0] / "tokenizer.json").read_bytes()
    earlier = []
    for name in SHIPPED:
        if (ROOT / "models" / name / "tokenizer.json").read_bytes() != reference_tokenizer:
            earlier.append(name)  # trained before the shared mixture: its losses are on other tokens
            metrics = json.loads((ROOT / "models" / name / "metrics.json").read_text())
            lines.append(f"| `{name}` | earlier model, another tokenizer and mixture: not comparable "
                         f"(results/models/{name}/NOTE.md) | {metrics['parameters'] / 1e6:.1f}M | | | | | | |")
            continue
        metrics = json.loads((ROOT / "models" / name / "metrics.json").read_text())
        config = json.loads((ROOT / "models" / name / "config.json").read_text())
        ffn = config["feedforward"]["type"] + (" + parity bottleneck" if config.get("bottleneck") else "")
        per_story = metrics.get("natural_held_out_per_story")
        seeds = [m.get("natural_held_out_per_story") for m in _seed_metrics(name)]
        seeds = [entry for entry in seeds if entry]
        spread = "not measured"
        if len(seeds) > 1:
            losses = [entry["loss"] for entry in seeds]
            spread = f"{sum(losses) / len(losses):.3f} ({min(losses):.3f}-{max(losses):.3f}, {len(losses)} seeds)"
            spans[name] = (min(entry["ci95"][0] for entry in seeds), max(entry["ci95"][1] for entry in seeds))
        gap = (baselines or {}).get("models", {}).get(name)
        gap_text = ("not measured" if not gap else f"{gap['below_trigram']:.3f} [{gap['below_trigram_ci95'][0]:.3f}, "
                    f"{gap['below_trigram_ci95'][1]:.3f}]")
        generated, epochs = metrics.get("generated_held_out_loss"), metrics.get("epochs")
        lines.append(
            f"| `{name}` | {ffn} | {metrics['parameters'] / 1e6:.1f}M | {_interval(per_story)} | {spread} | {gap_text} | "
            f"{'' if generated is None else f'{generated:.3f}'} | {'' if epochs is None else f'{epochs:.2f}'} | "
            f"{metrics['steps']:,} |")
    cut = [name for name in SHIPPED if name not in earlier and any(
        m.get("stopped") == "time budget" for m in _seed_metrics(name))]
    notes = ["", "Losses in nats/token. The natural held-out split: stories never trained or chosen on, each read "
             "alone (`circuitlab.training.evaluation.document_losses`); the interval is a bootstrap over stories. "
             "Generated: the held-out seed of the story generator, packed windows. Passes: over the training mixture. "
             "Steps and passes are seed 0's (each seed's in results/models/<name>/seed<N>/metrics.json). "
             + ("Every seed made its full steps." if not cut else
                "Stopped by their time budget before the full steps (the learning rate decayed to fit it): "
                + "; ".join(f"`{name}` ({_cut_seeds(name)})" for name in cut) + "; every other run made the full steps.")]
    if baselines:
        b = baselines["baselines"]
        notes.append(f"Counting alone on the same training text and tokenizer (`scripts/corpus_baselines.py`): unigram "
                     f"{_interval(b['unigram'])}, Kneser-Ney bigram {_interval(b['bigram'])}, Kneser-Ney trigram "
                     f"{_interval(b['trigram'])}. Every loss here is over the {baselines['held_out_stories']:,} held-out "
                     f"stories ({baselines['held_out_tokens']:,} tokens) of the corpus the models were trained on"
                     + (" (the natural corpus as committed: data/README.md)." if _held_out_now() == baselines["held_out_stories"]
                        else " (their cards name its commit; the corpus has grown since: data/README.md)."))
    if earlier:
        notes.append(f"Not retrained on the shared mixture: {', '.join(f'`{n}`' for n in earlier)} (its note says why).")
    if spans:
        notes.append("Between designs, where the seeds' intervals do not overlap: " + "; ".join(model_comparisons(spans)) + ".")
    return "\n".join(lines) + "\n" + "\n".join(notes) + "\n"


CARD_SECTION = "## Beside counting baselines and its other seeds"


def card_baselines(name: str) -> str:
    """The `generated:baselines` block of a shipped model's card: its natural held-out loss (seed 0, as shipped)
    beside the unigram, bigram and Kneser-Ney trigram fitted on the same training text, its gap below the trigram
    and the spread of its training seeds, each loss with its 95% interval over held-out stories."""
    metrics = json.loads((ROOT / "models" / name / "metrics.json").read_text())
    baselines_path = ROOT / "results" / "baselines" / "natural.json"
    baselines = json.loads(baselines_path.read_text()) if baselines_path.is_file() else None
    seeds = [m for m in _seed_metrics(name) if m.get("natural_held_out_per_story")]
    per_story = metrics.get("natural_held_out_per_story")
    stories = f" over {baselines['held_out_stories']:,} stories" if baselines else ""
    lines = [f"| natural held-out split | loss, nats/token [95% interval{stories}] |", "| --- | ---: |",
             f"| this model (seed {metrics.get('seed', 0)}) | {_interval(per_story)} |"]
    for m in seeds:
        lines.append(f"| training seed {m.get('seed')} ({m['steps']:,} steps, {m.get('stopped', '')}) | "
                     f"{_interval(m['natural_held_out_per_story'])} |")
    if len(seeds) > 1:
        losses = [m["natural_held_out_per_story"]["loss"] for m in seeds]
        lines.append(f"| seeds: mean (min-max) | {sum(losses) / len(losses):.3f} ({min(losses):.3f}-{max(losses):.3f}) |")
    gap = (baselines or {}).get("models", {}).get(name)
    if baselines:
        b = baselines["baselines"]
        lines += [f"| unigram | {_interval(b['unigram'])} |", f"| Kneser-Ney bigram | {_interval(b['bigram'])} |",
                  f"| Kneser-Ney trigram | {_interval(b['trigram'])} |"]
    if gap:
        lines.append(f"| this model below the trigram (paired by story) | {gap['below_trigram']:.3f} "
                     f"[{gap['below_trigram_ci95'][0]:.3f}, {gap['below_trigram_ci95'][1]:.3f}] |")
    source = ("the baselines: not measured (run scripts/corpus_baselines.py)" if not baselines else
              "the baselines fitted on this model's training text with its tokenizer by scripts/corpus_baselines.py "
              "(results/baselines/natural.json)")
    lines += ["", f"Written by `python scripts/docs_pages.py` from the seeds' metrics (results/models/{name}/) and {source}."]
    return "\n".join(lines) + "\n"


def card(text: str, name: str) -> str:
    """A shipped model's card with its baselines block rendered afresh (appended as a section when missing)."""
    if "<!-- generated:baselines -->" not in text:
        text = text.rstrip("\n") + f"\n\n{CARD_SECTION}\n\n<!-- generated:baselines -->\n<!-- /generated:baselines -->\n"
    return replace_block(text, "baselines", card_baselines(name))


def benchmarks_md(table: str) -> str:
    return ("# circuitlab benchmarks\n\nThe results of record, generated by `python scripts/docs_pages.py` from "
            "`benchmarks/results/current.json`\n(each row names the result file it reads). Every earlier run is "
            "in `benchmarks/results/`, with the log of how\nthe numbers were reached in "
            "`benchmarks/results/history.md`; how to measure is in `docs/performance.md`.\n\n" + table)


CLAIMS_JSON = ROOT / "analyses" / "claims.json"


def _estimate(row: dict) -> str:
    if row["estimate"] is None:
        return ""
    interval = "" if row["ci95"] is None else f" [{row['ci95'][0]:.3g}, {row['ci95'][1]:.3g}]"
    return f", {row['estimate']:.3g}{interval}"


def _sentence_start(text: str) -> str:
    """A claim continuing a sentence: its first letter lowered, unless it starts a name (ParityTransformer)."""
    first = text.split(" ", 1)[0]
    return text if any(ch.isupper() for ch in first[1:]) else text[0].lower() + text[1:]


def claims_section(rows: list[dict] | None = None) -> str:
    """The README's claims block: verdict counts, then the claims that hold, those contradicted and those the
    models are too small to test, each with its estimate and interval (all from analyses/claims.json)."""
    if rows is None:
        if not CLAIMS_JSON.is_file():
            return "The claims have not been measured yet: run `python scripts/claims.py`.\n"
        rows = json.loads(CLAIMS_JSON.read_text())
    verdicts = ("reproduced", "contradicted", "inconclusive", "not tested at the paper's scale", "not measured")
    paper = [row for row in rows if row["config"] == "paper"]
    counts = ", ".join(f"{sum(r['verdict'] == v for r in paper)} {v}" for v in verdicts)

    def listed(verdict: str, with_reason: bool = False) -> str:
        chosen = [row for row in paper if row["verdict"] == verdict]
        if not chosen:
            return "none"
        # with_reason: the reason's first clause (the two scales); the row in claims.md has the rest
        return "; ".join(f"{_sentence_start(row['claim'])} (`{row['id']}`{_estimate(row)}"
                         + (f": {row['reason'].split('; ')[0]}" if with_reason else "") + ")" for row in chosen)

    ceiling = [row["id"] for row in paper if row["verdict"] == "inconclusive" and "metric at ceiling" in row["reason"]]
    deviations = [row for row in rows if row["config"] != "paper"]
    lines = [
        f"The papers' claims ([`analyses/claims.md`](analyses/claims.md), `analyses/claims.json`): of the "
        f"{len(paper)} rows judged on the papers' configurations, {counts}; {len(deviations)} more rows measure "
        "circuitlab's deviations from the papers, each named in its row. A verdict needs the 95% interval of the "
        "effect to clear the rule and no null (dense model, random initialisation, shuffled labels, raw token embeddings, a pressure-free control) to pass it.",
        "",
        f"- **Holds**: {listed('reproduced')}.",
        f"- **Contradicted**: {listed('contradicted')}.",
        f"- **Too small to test**: {listed(NOT_AT_SCALE, with_reason=True)}.",
        f"- **Inconclusive** ({sum(r['verdict'] == 'inconclusive' for r in paper)} rows; the metric is at ceiling, "
        f"a null passing it too, in {len(ceiling)}" + (f": {', '.join(f'`{i}`' for i in ceiling)}" if ceiling else "")
        + "); the rest have an interval that straddles the rule or no interval, and say which.",
    ]
    return "\n".join(lines) + "\n"


NOT_AT_SCALE = "not tested at the paper's scale"


def readme(text: str) -> str:
    """The README with its generated blocks rendered afresh from their sources."""
    return replace_block(replace_block(text, "models", models_table()), "claims", claims_section())


def replace_block(text: str, name: str, body: str) -> str:
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"no {start} ... {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}{end}{tail}"


def corpus_scaling() -> str:
    """docs/generated/corpus_scaling.md: what the corpus's growth bought (results/corpus-scaling/scaling.json of
    scripts/corpus_scaling.py) and the log-linear estimate of the natural tokens the 2.6 target needs."""
    path = ROOT / "results" / "corpus-scaling" / "scaling.json"
    if not path.is_file():
        return "Not measured: run `python scripts/corpus_scaling.py`.\n"
    record = json.loads(path.read_text())
    lines = [f"Natural training tokens {record['natural_tokens_before']:,.0f} -> {record['natural_tokens_after']:,.0f} "
             f"({record['growth']:.3f}x; same tokenizer, settings and two passes, so the steps grow with it), the "
             "held-out loss of each run on the held-out stories both corpora share "
             "(`python scripts/corpus_scaling.py`):", "",
             "| model | seed | shared stories | loss before | loss after | difference [95% interval] | natural tokens "
             f"for {record['target']} (log-linear, two points) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in record["rows"]:
        if "difference" not in row:
            lines.append(f"| `{row['model']}` | {row['seed']} | not compared: a run stopped by its time budget "
                         f"(before: {row['before_stopped']}; after: {row['after_stopped']}) | | | | |")
            continue
        needed = "never (no fall)" if row["tokens_for_target"] is None else f"{row['tokens_for_target'] / 1e6:,.1f}M"
        lines.append(f"| `{row['model']}` | {row['seed']} | {row['stories']:,} | {row['before']:.3f} | {row['after']:.3f} | "
                     f"{row['difference']:+.3f} [{row['ci95'][0]:+.3f}, {row['ci95'][1]:+.3f}] | {needed} |")
    return "\n".join(lines) + "\n"


def outputs() -> dict[Path, str | bytes]:
    performance = performance_table()
    models = models_table()
    files: dict[Path, str | bytes] = {
        GENERATED / "performance.md": performance,
        GENERATED / "models.md": models,
        GENERATED / "corpus_scaling.md": corpus_scaling(),
        ROOT / "BENCHMARKS.md": benchmarks_md(performance),
        ROOT / "README.md": readme((ROOT / "README.md").read_text(encoding="utf-8")),
    }
    for name in SHIPPED:
        path = ROOT / "models" / name / "card.md"
        files[path] = card(path.read_text(encoding="utf-8"), name)
    for name in FIGURES:
        files[ROOT / "docs" / "figures" / name] = (ROOT / "analyses" / "figures" / name).read_bytes()
    return files


def validation_figure() -> Path | None:
    """docs/figures/validation_curves.png: the four shipped models' validation curves, every seed kept."""
    from circuitlab.demo.readers import validation_curves, validation_curves_figure
    from circuitlab.figures import write_png

    curves = validation_curves(ROOT / "models", ROOT / "results" / "models", SHIPPED)
    if not len(curves):
        return None
    return write_png(validation_curves_figure(curves), ROOT / "docs" / "figures" / "validation_curves.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, content in outputs().items():
        current = path.read_bytes() if path.exists() else None
        wanted = content.encode("utf-8") if isinstance(content, str) else content
        if current == wanted:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(wanted)
    if args.check and stale:
        print("out of date (run python scripts/docs_pages.py):", ", ".join(stale), file=sys.stderr)
        return 1
    print("up to date" if not stale else f"wrote {', '.join(stale)}")
    if not args.check:
        figure = validation_figure()
        print(f"wrote {figure.relative_to(ROOT)}" if figure else "validation curves: no training log with "
              "validation losses, or no browser to render the PNG")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
