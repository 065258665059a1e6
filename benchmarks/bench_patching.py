"""Layer x position residual-stream patching: circuitlab's batched nie_grid against TransformerLens'
generic_activation_patch (one forward per patch), on the same model and inputs.

Both sides compute the same numbers (the script checks it and prints the largest difference) and both are
timed end to end for one pair: caching the counterfactual run, the clean baseline, and every patched run.
Prints the median of `--repeats` timed runs after one warm-up, and the speed ratio measured in this run.

    python benchmarks/bench_patching.py --preset sgatlin-stories --seq-len 32
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # TransformerLens shows a bar per call; keep the timing output clean

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from transformer_lens import patching as tl_patching  # noqa: E402

from circuitlab import CircuitTransformer, ModelConfig  # noqa: E402
from circuitlab.analysis.patching import PatchPair, nie_grid  # noqa: E402


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def transformer_lens_grid(model, pair: PatchPair, index_df: pd.DataFrame) -> torch.Tensor:
    clean = torch.tensor([pair.clean_tokens], device=model.W_E.device)
    patch = torch.tensor([pair.patch_tokens], device=model.W_E.device)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[0, -1, pair.clean_answer_id] - logits[0, -1, pair.patch_answer_id]

    with torch.no_grad():
        _, patch_cache = model.run_with_cache(patch)
        metric(model(clean))  # the clean baseline NIE needs, as nie_grid computes it
        return tl_patching.generic_activation_patch(
            model, clean, patch_cache, metric, tl_patching.layer_pos_patch_setter, "resid_pre", index_df=index_df
        )


def circuitlab_grid(model, pair: PatchPair, seq_len: int, batch_size: int) -> pd.DataFrame:
    return nie_grid(
        model, [pair], layers=list(range(model.cfg.n_layers)), positions=list(range(seq_len)),
        hooks="blocks.{layer}.hook_resid_pre", batch_size=batch_size, progress=False,
    )


def timed(fn, device: torch.device, repeats: int) -> tuple[float, object]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        result = fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="sgatlin-stories", help="model shape (random weights)")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64, help="nie_grid interventions per forward")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    device = torch.device(args.device)
    model = CircuitTransformer(ModelConfig.preset(args.preset))
    model.reset_parameters(seed=0)
    model = model.to(device).eval()
    generator = torch.Generator().manual_seed(0)
    clean, patch = torch.randint(0, model.cfg.d_vocab, (2, args.seq_len), generator=generator).tolist()
    pair = PatchPair(clean, patch, clean_answer_id=11, patch_answer_id=12)
    n_layers = model.cfg.n_layers
    index_df = pd.DataFrame([(l, p) for l in range(n_layers) for p in range(args.seq_len)], columns=["layer", "pos"])

    tl_seconds, reference = timed(lambda: transformer_lens_grid(model, pair, index_df), device, args.repeats)
    ours_seconds, table = timed(lambda: circuitlab_grid(model, pair, args.seq_len, args.batch_size), device, args.repeats)
    difference = (torch.tensor(table["m_patched"].to_numpy()) - reference.double().cpu()).abs().max().item()

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"model {args.preset} (random weights), {n_layers} layers x {args.seq_len} positions = {len(index_df)} patches, "
          f"blocks.{{l}}.hook_resid_pre, one pair, float32, {name}")
    print(f"TransformerLens generic_activation_patch: {tl_seconds * 1e3:9.1f} ms  (one forward per patch)")
    print(f"circuitlab nie_grid (batch {args.batch_size}):       {ours_seconds * 1e3:9.1f} ms")
    print(f"speed ratio (TransformerLens / circuitlab): {tl_seconds / ours_seconds:.1f}x")
    print(f"max |m_patched difference| = {difference:.2e}")


if __name__ == "__main__":
    main()
