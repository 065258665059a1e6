"""The measuring context: the shipped models, how much held-out data each row sees, and the analyses several
rows share (each computed once per context), plus the committed results files the rows read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from circuitlab.claims.rows import VERDICTS
from circuitlab.errors import UserError

MODELS = ("sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories")
RANDOM_SGATLIN = "random-init sgatlin"
# seed 002's own NC-FFN (operands not centred): trained beside the shipped models by scripts/train_shipped.sh, kept
# in results/models (not shipped); seed 002's rows on the paper's configuration read its weights
UNCENTRED = "legible-stories-uncentred"


@dataclass(frozen=True)
class Sizes:
    """How much held-out data each measurement sees."""

    db_stories: int  # generated held-out stories in the circuit database (about 70 tokens each)
    semantic_queries: int
    semantic_shuffles: int
    enrichment_points: int
    nie_pairs: int
    legibility_windows: int  # windows of natural held-out text
    legibility_seq_len: int
    coherence_directions: int
    usage_resamples: int  # bootstrap resamples of the stories behind the neuron-usage rows

    @classmethod
    def full(cls) -> Sizes:
        # seed 002 probes 12 batches of 8 x 256 tokens; seed 000 collects 128 stories of up to 1024 tokens
        return cls(db_stories=400, semantic_queries=2000, semantic_shuffles=20, enrichment_points=4000,
                   nie_pairs=128, legibility_windows=96, legibility_seq_len=256, coherence_directions=4096,
                   usage_resamples=500)

    @classmethod
    def fast(cls) -> Sizes:
        return cls(db_stories=24, semantic_queries=150, semantic_shuffles=3, enrichment_points=600,
                   nie_pairs=6, legibility_windows=12, legibility_seq_len=64, coherence_directions=512,
                   usage_resamples=40)


@dataclass
class Context:
    """Models (by shipped name, from `models_dir` when given) and the analyses several rows share."""

    fast: bool = False
    models_dir: Path | None = None
    results_dir: Path | None = None
    ladder_results: Path | None = None  # results/ladder/ladder_results.json of `circuitlab ladder`, when run
    legible_sweep: Path | None = None  # the paper's (uncentred) sweep: results/legible-sweep-uncentred/legibility_regimes.json
    legible_sweep_centred: Path | None = None  # circuitlab's centred sweep: results/legible-sweep/legibility_regimes.json
    parity_report: Path | None = None  # results/parity/parity_report.json of `circuitlab report parity`
    sae_comparison: Path | None = None  # results/parity/sae_comparison.json of `circuitlab report sae`
    uncentred_model: Path | None = None  # the UNCENTRED model's folder: results/models/legible-stories-uncentred/seed0
    progress: bool = False
    _models: dict[str, Any] = field(default_factory=dict)
    _window_losses: dict[str, Any] = field(default_factory=dict)
    _dbs: dict[str, Any] = field(default_factory=dict)
    _nie: dict[tuple[str, str], Any] = field(default_factory=dict)

    @property
    def sizes(self) -> Sizes:
        return Sizes.fast() if self.fast else Sizes.full()

    def folder(self, name: str) -> Path:
        from circuitlab.architectures.weights import resolve_model_folder

        if name == UNCENTRED:
            if self.uncentred_model is None or not Path(self.uncentred_model, "config.json").is_file():
                raise UserError(f"the {UNCENTRED} model is not at {self.uncentred_model}: train it with "
                                f"MODELS={UNCENTRED} SEEDS=0 bash scripts/train_shipped.sh")
            return Path(self.uncentred_model)
        if self.models_dir is not None:
            folder = Path(self.models_dir) / name
            if not folder.is_dir():
                raise UserError(f"{folder} does not exist: the claims read the models {MODELS} from the models folder")
            return folder
        return resolve_model_folder(name)

    def model(self, name: str) -> Any:
        if name not in self._models:
            from circuitlab.architectures.transformer import load_model

            self._models[name] = load_model(self.folder(name)).eval()
        return self._models[name]

    def metrics(self, name: str) -> dict[str, Any]:
        path = self.folder(name) / "metrics.json"
        if not path.is_file():
            raise UserError(f"{path} is missing: the model's training metrics are needed for this claim")
        return json.loads(path.read_text())

    # shared analyses (cached per context)

    @cached_property
    def sgatlin_db(self) -> Any:
        return self.db("sgatlin-stories")

    def db(self, name: str, text: str = "generated") -> Any:
        """The circuit database of a shipped model, or of RANDOM_SGATLIN (the shipped sgatlin design, randomly
        initialised with seed 0; the nulls of the clustering rows), on the generated held-out stories or on the
        natural held-out split (`text` "natural": its first db_stories // 4 stories, about four times as long,
        each word labelled by circuitlab.data's lexicon)."""
        if (name, text) not in self._dbs:
            from types import SimpleNamespace

            from circuitlab.analysis.circuitdb import CircuitDB
            from circuitlab.data import held_out_stories, label_text, load_natural_stories

            model = self.random_sgatlin() if name == RANDOM_SGATLIN else self.model(name)
            if text == "natural":
                stories = load_natural_stories().held_out()[: max(self.sizes.db_stories // 4, 4)]
                texts = [SimpleNamespace(text=story.text, spans=label_text(story.text)) for story in stories]
            else:
                texts = held_out_stories(self.sizes.db_stories)
            self._dbs[(name, text)] = CircuitDB.build(model, texts, index=None, progress=self.progress)
        return self._dbs[(name, text)]

    def embedding_db(self, text: str = "generated") -> Any:
        """The raw-token-embedding null of the clustering rows: sgatlin's W_E row of each circuit's token in
        `db("sgatlin-stories", text)` (circuitlab.claims.nulls.EmbeddingNeighbours)."""
        if ("embedding", text) not in self._dbs:
            from circuitlab.claims.nulls import EmbeddingNeighbours

            db = self.db("sgatlin-stories", text)
            embedding = self.model("sgatlin-stories").W_E.detach().float().cpu().numpy()
            self._dbs[("embedding", text)] = EmbeddingNeighbours(db.metadata, embedding, db.layers)
        return self._dbs[("embedding", text)]

    def random_init(self, name: str) -> Any:
        """A model of `name`'s design, randomly initialised with seed 0 (with its tokenizer): the nulls' model."""
        key = f"random-init {name}"
        if key not in self._models:
            import torch

            trained = self.model(name)
            torch.manual_seed(0)
            model = type(trained)(trained.config).eval()
            model.tokenizer = trained.tokenizer
            self._models[key] = model
        return self._models[key]

    def random_sgatlin(self) -> Any:
        return self.random_init("sgatlin-stories")

    def nie_table(self, name: str, facts: str = "planted") -> Any:
        """nie_grid of a shipped model (one row per pair and cell) on the planted fact pairs it knows, or (`facts`
        "natural") on the pairs of facts mined from the natural training split (circuitlab.claims.natural_facts)."""
        if (name, facts) not in self._nie:
            from circuitlab.analysis.patching import nie_grid
            from circuitlab.claims.natural_facts import natural_fact_pairs

            model = self.model(name)
            pairs = natural_fact_pairs(model, self.sizes.nie_pairs) if facts == "natural" else \
                known_fact_pairs(model, self.sizes.nie_pairs)
            self._nie[(name, facts)] = nie_grid(model, pairs, progress=self.progress)
        return self._nie[(name, facts)]

    @cached_property
    def sgatlin_nie(self) -> Any:
        from circuitlab.analysis.patching import nie_summary

        return nie_summary(self.nie_table("sgatlin-stories"))

    @cached_property
    def sgatlin_usage(self) -> Any:
        from circuitlab.analysis.usage import database_usage

        return database_usage(self.sgatlin_db)

    def usage(self, name: str, text: str = "generated") -> Any:
        """database_usage of `db(name, text)` (cached with the database's other analyses)."""
        key = ("usage", name, text)
        if key not in self._dbs:
            from circuitlab.analysis.usage import database_usage

            self._dbs[key] = self.sgatlin_usage if (name, text) == ("sgatlin-stories", "generated") else \
                database_usage(self.db(name, text))
        return self._dbs[key]

    def usage_resamples(self, name: str, text: str = "generated") -> dict[str, Any]:
        """usage_bootstrap of `db(name, text)`: each layer's Gini and fraction of neurons used over resamples of
        its stories ({"gini": [B, L], "fraction_used": [B, L]})."""
        key = ("usage resamples", name, text)
        if key not in self._dbs:
            from circuitlab.analysis.usage import usage_bootstrap

            db = self.db(name, text)
            self._dbs[key] = usage_bootstrap({layer: db.codes[layer] for layer in db.layers},
                                             db.metadata["token_id"].to_numpy(), db.metadata["sequence_id"].to_numpy(),
                                             n_resamples=self.sizes.usage_resamples)
        return self._dbs[key]

    @cached_property
    def legible_tokens(self) -> Any:
        """The natural held-out windows seed 002's per-channel statistics are read on (every model alike)."""
        from circuitlab.analysis.legibility import held_out_windows
        from circuitlab.data import load_natural_stories

        texts = [story.text for story in load_natural_stories().held_out()]
        model = self.model("legible-stories")
        return held_out_windows(model, texts, seq_len=self.sizes.legibility_seq_len)[: self.sizes.legibility_windows]

    def legibility_stats_of(self, name: str) -> Any:
        """legibility_stats of a legible model (legible-stories or UNCENTRED) on `legible_tokens`."""
        key = ("legibility", name)
        if key not in self._dbs:
            from circuitlab.analysis.legibility import legibility_stats

            self._dbs[key] = legibility_stats(self.model(name), self.legible_tokens, progress=self.progress)
        return self._dbs[key]

    def random_legibility_stats_of(self, name: str) -> Any:
        """The same statistics of a legible model's design, randomly initialised (seed 0): a null."""
        key = ("random legibility", name)
        if key not in self._dbs:
            from circuitlab.analysis.legibility import legibility_stats

            self._dbs[key] = legibility_stats(self.random_init(name), self.legible_tokens, progress=self.progress)
        return self._dbs[key]

    @property
    def legible_stats(self) -> Any:
        return self.legibility_stats_of("legible-stories")

    @property
    def random_legible_stats(self) -> Any:
        """The same statistics of the shipped legible design, randomly initialised (seed 0): a null."""
        return self.random_legibility_stats_of("legible-stories")

    @cached_property
    def pressure_free_stats(self) -> Any:
        """gelu-stories' MLP pre-activations through sigmoid(4z) on the same windows (circuitlab.claims.selectivity)."""
        from circuitlab.claims.selectivity import pressure_free_stats

        return pressure_free_stats(self.model("gelu-stories"), self.legible_tokens)

    def dla_of(self, name: str) -> Any:
        """Direct logit attribution of a legible model's next token after 'The turtle was' (one prompt)."""
        key = ("dla", name)
        if key not in self._dbs:
            from circuitlab.analysis.attribution import direct_logit_attribution

            model = self.model(name)
            self._dbs[key] = direct_logit_attribution(model, [model.tokenizer.eos_id] + model.tokenizer.encode("The turtle was"))
        return self._dbs[key]

    def attributions_of(self, name: str, random_init: bool = False) -> list[dict[str, Any]]:
        """legible_attribution_share of each window of `legible_tokens` (its share_mean, attention_weaker_mean,
        ...), for a model or (random_init) its design randomly initialised (seed 0)."""
        key = ("attributions", name, random_init)
        if key not in self._dbs:
            from circuitlab.analysis.attribution import legible_attribution_share

            model = self.random_init(name) if random_init else self.model(name)
            self._dbs[key] = [legible_attribution_share(model, window[None], batch_size=1, progress=False)
                              for window in self.legible_tokens]
        return self._dbs[key]

    def legible_shares_of(self, name: str, random_init: bool = False) -> list[float]:
        """The legible share of the direct logit attribution (legible_attribution_share's share_mean) of each
        window of `legible_tokens`, for a legible model or (random_init) its design randomly initialised (seed 0)."""
        return [window["share_mean"] for window in self.attributions_of(name, random_init)]

    @cached_property
    def held_out_text(self) -> dict[str, list[str]]:
        """The held-out texts every model's loss is measured on: the natural held-out split (never trained on
        by any shipped model) and generated stories of the held-out seed."""
        from circuitlab.data import held_out_stories, load_natural_stories

        return {"natural": [story.text for story in load_natural_stories().held_out()],
                "generated": [story.text for story in held_out_stories(self.sizes.db_stories)]}

    def held_out_window_losses(self, name: str) -> dict[str, tuple[list[float], list[int]]]:
        """Summed next-token loss (nats) and token count of every window of `held_out_text`, cut into the same
        windows for every model (the shipped models share one tokenizer), so two models compare on identical
        tokens and a bootstrap over windows can pair them."""
        import torch
        import torch.nn.functional as F

        from circuitlab.analysis.legibility import held_out_windows

        if name in self._window_losses:
            return self._window_losses[name]
        model = self.model(name)
        losses = {}
        for which, texts in self.held_out_text.items():
            windows = held_out_windows(model, texts, seq_len=self.sizes.legibility_seq_len)
            windows = windows[: self.sizes.legibility_windows]
            sums: list[float] = []
            with torch.no_grad():
                for batch in windows.split(16):
                    logits = model(batch).float()[:, :-1]
                    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                                reduction="none").view(batch.shape[0], -1)
                    sums += per_token.sum(dim=1).tolist()
            losses[which] = (sums, [windows.shape[1] - 1] * len(sums))
        self._window_losses[name] = losses
        return losses

    def held_out_loss(self, name: str) -> dict[str, float]:
        """Mean next-token loss (nats/token) of a model on `held_out_text` (see `held_out_window_losses`)."""
        return {which: sum(sums) / sum(counts) for which, (sums, counts) in self.held_out_window_losses(name).items()}

    def result_file(self, name: str) -> dict[str, Any] | None:
        """The JSON of `legible_sweep`, `parity_report` or `sae_comparison` (by field name), or None when it is not given or absent."""
        path = getattr(self, name)
        if path is None or not Path(path).is_file():
            return None
        try:
            record = json.loads(Path(path).read_text())
        except json.JSONDecodeError as error:
            raise UserError(f"{path}: not valid JSON ({error})") from error
        if not isinstance(record, dict):
            raise UserError(f"{path}: expected a JSON object, got {type(record).__name__}")
        return record

    def results(self) -> dict[str, dict[str, Any]]:
        """Claim entries of every analyses/results/*.json (later files override earlier ones)."""
        entries: dict[str, dict[str, Any]] = {}
        if self.results_dir is None or not Path(self.results_dir).is_dir():
            return entries
        for path in sorted(Path(self.results_dir).glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except json.JSONDecodeError as error:
                raise UserError(f"{path}: not valid JSON ({error})") from error
            claims = record.get("claims", {}) if isinstance(record, dict) else {}
            if not isinstance(claims, dict):
                raise UserError(f"{path}: 'claims' must map claim ids to results, got {type(claims).__name__}")
            for claim_id, entry in claims.items():
                if not isinstance(entry, dict) or "ours" not in entry or entry.get("verdict") not in VERDICTS:
                    raise UserError(
                        f"{path}: claim {claim_id!r} needs 'ours' (text) and 'verdict' (one of {', '.join(VERDICTS)})"
                    )
                entries[claim_id] = {**entry, "source": path.name}
        return entries


def known_fact_pairs(model: Any, n_pairs: int) -> list:
    """Fact pairs built from the facts the model answers correctly (all single-token facts if fewer than 2)."""
    from circuitlab.data import FACTS, build_fact_pairs, fact_accuracy

    _, table = fact_accuracy(lambda tokens: model(tokens), model.tokenizer)
    known = set(table.loc[table["correct"], "noun"])
    facts = [fact for fact in FACTS if fact.noun in known]
    if len(facts) < 2:
        facts = [fact for fact in FACTS if fact.noun in set(table["noun"])]
    return build_fact_pairs(model.tokenizer, facts=facts, seed=0, n_pairs=min(n_pairs, len(facts) * (len(facts) - 1)))

