"""`circuitlab report sae`: top-k sparse autoencoders set beside the parity bottleneck. Loads the parity and GELU
models, trains one autoencoder per layer on the GELU model's FFN writes over the natural stories' training
split (circuitlab.training.sae_fit; or loads it from --sae-dir), measures the comparison
(circuitlab.analysis.sae_compare) and writes it as JSON and markdown (circuitlab.analysis.sae_report). It lives
in the command layer because it joins training and analysis, which do not import each other."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from circuitlab.errors import UserError


def weights_digest(model) -> str:
    """sha256 of a loaded model's tensors: an autoencoder records the one of the model it was trained on."""
    from circuitlab.architectures.weights import tensors_sha256

    return tensors_sha256({name: tensor.detach().cpu() for name, tensor in model.state_dict().items()})


def _load_models(args: argparse.Namespace, device):
    from circuitlab.architectures.transformer import load_model

    parity = load_model(args.model, device=device).eval()
    if parity.config.bottleneck is None:
        raise UserError(f"{args.model} has no parity bottleneck (config.bottleneck is null)")
    gelu = load_model(args.gelu, device=device).eval()
    if gelu.tokenizer is not None and parity.tokenizer is not None and gelu.tokenizer.hash() != parity.tokenizer.hash():
        raise UserError(f"{args.gelu} and {args.model} use different tokenizers; their tokens would not compare")
    if (gelu.config.n_layers, gelu.config.d_model) != (parity.config.n_layers, parity.config.d_model):
        raise UserError(f"{args.gelu} has {gelu.config.n_layers} layers of width {gelu.config.d_model}, {args.model} "
                        f"{parity.config.n_layers} of width {parity.config.d_model}; the comparison needs the same shape")
    return parity, gelu


def autoencoders(args: argparse.Namespace, parity, gelu, natural: Path, device) -> tuple[list, list[dict]]:
    """One autoencoder per layer of `gelu` with the bottleneck's m and k (or the overrides): loaded from
    --sae-dir when there and made for this model and these settings, else trained and saved there."""
    from circuitlab.analysis.parity_measure import _shown, natural_windows
    from circuitlab.analysis.sae import CONFIG_FILE, SAEConfig, TopKSAE
    from circuitlab.analysis.sae_compare import MLP_OUT, write_activations
    from circuitlab.training.sae_fit import fit_dictionary

    code = parity.blocks[0].ffn_code_layer
    d = gelu.config.d_model
    try:
        configs = [SAEConfig(d_model=d, n_latents=args.n_latents or code.n_features, k=args.k or code.k,
                             k_aux=args.k_aux or d // 2, dead_after=args.dead_after, seed=args.seed + layer)
                   for layer in range(gelu.config.n_layers)]
    except ValueError as error:
        raise UserError(f"autoencoder settings: {error}") from None
    digest = weights_digest(gelu)
    saes: list = [None] * len(configs)
    records: list[dict] = [{}] * len(configs)
    for layer, config in enumerate(configs):
        folder = args.sae_dir / f"layer_{layer}"
        if args.retrain or not (folder / CONFIG_FILE).is_file():
            continue
        sae, record = TopKSAE.load(folder, device)
        if sae.config != config or record.get("model_weights") != digest:
            raise UserError(f"{folder} holds an autoencoder of other settings or another model ({sae.config}, trained "
                            f"on {record.get('model')}); give another --sae-dir, or --retrain to replace it")
        saes[layer], records[layer] = sae.eval(), record
    missing = [layer for layer, sae in enumerate(saes) if sae is None]
    if missing:
        windows = natural_windows(gelu, natural, args.train_tokens, args.seq_len, split="train")
        writes = write_activations(gelu, windows, args.batch_size, device)
        for layer in missing:
            sae = TopKSAE(configs[layer]).to(device)
            started = time.perf_counter()
            fit = fit_dictionary(sae, writes[layer], steps=args.steps, batch_size=args.sae_batch_size, lr=args.lr,
                                 warmup=args.warmup, seed=args.seed + layer, progress=not args.quiet,
                                 what=f"autoencoder of layer {layer}")
            log = fit.pop("log")
            records[layer] = {"model": str(args.gelu), "model_weights": digest, "hook": MLP_OUT(layer),
                              "natural": _shown(natural), "split": "train",
                              "training": {**fit, "seconds": time.perf_counter() - started}, "log": log}
            sae.save(args.sae_dir / f"layer_{layer}", record=records[layer])
            saes[layer] = sae.eval()
        del writes
    return saes, records


def run(args: argparse.Namespace) -> int:
    import torch

    from circuitlab.analysis.sae_compare import compare
    from circuitlab.analysis.sae_report import COMPARISON_JSON, COMPARISON_MARKDOWN, comparison_markdown
    from circuitlab.atomic import atomic_write_text

    if args.json is None and args.markdown is None:  # the committed results, where the Parity page looks
        from circuitlab.resources import results_root

        args.json = results_root() / "parity" / COMPARISON_JSON
        args.markdown = results_root() / "parity" / COMPARISON_MARKDOWN
    device = torch.device(args.device)
    if device.type == "cuda":  # as language-model training does: TF32 matrix products for the m-wide encoder
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.natural is None:
        from circuitlab.resources import natural_root

        args.natural = natural_root()
    parity, gelu = _load_models(args, device)
    saes, records = autoencoders(args, parity, gelu, args.natural, device)
    result = compare(parity, gelu, saes, parity_dir=str(args.model), gelu_dir=str(args.gelu), sae_dir=args.sae_dir,
                     natural=args.natural, n_tokens=args.tokens, seq_len=args.seq_len, batch_size=args.batch_size,
                     device=device, probe_stories=args.probe_stories, probe_seed=args.probe_seed,
                     max_iter=args.probe_max_iter, sae_records=records)
    markdown = comparison_markdown(result)
    print(markdown)
    for path, text in ((args.json, json.dumps(result, indent=1) + "\n"), (args.markdown, markdown + "\n")):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
    return 0
