"""Render the README's figures from the shipped models as PNGs in docs/figures/.

Plotly figures are written as self-contained HTML and photographed with headless Chromium (Debian's
`chromium`), so no image-export package is needed.

    .venv/bin/python scripts/readme_figures.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "figures"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]


def photograph(figure, name: str, width: int = 1000, height: int = 560) -> Path:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs Debian's chromium (apt-get install chromium)")
    figure.update_layout(width=width, height=height)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / f"{name}.html"
        figure.write_html(page, include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
        target = OUT / f"{name}.png"
        subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
             "--virtual-time-budget=5000", f"--screenshot={target}", page.as_uri()],
            check=True, capture_output=True, timeout=120,
        )
    print(f"wrote {target.relative_to(ROOT)}")
    return target


def main() -> None:
    torch.set_num_threads(1)
    from circuitlab import load_model
    from circuitlab.analysis import direct_logit_attribution, nie_grid
    from circuitlab.analysis.attribution import dla_overview_figure
    from circuitlab.analysis.legibility import legibility_stats, held_out_windows
    from circuitlab.analysis.legibility_figures import regimes_by_layer_figure
    from circuitlab.analysis.patching import nie_heatmap
    from circuitlab.data import build_fact_pairs, held_out_stories

    sgatlin = load_model("sgatlin-stories")
    pairs = build_fact_pairs(sgatlin.tokenizer, n_pairs=40)
    figure = nie_heatmap(nie_grid(sgatlin, pairs, progress=False))
    figure.update_layout(title="sgatlin-stories: NIE of do(g = g_patch) on 40 fact pairs (seed 000, Figure 7)")
    photograph(figure, "nie_sgatlin", 800, 460)

    legible = load_model("legible-stories")
    dla = direct_logit_attribution(legible, "The turtle was")
    figure = dla_overview_figure(dla)
    photograph(figure, "dla_legible", 900, 420)

    tokens = held_out_windows(legible, [s.text for s in held_out_stories(200)], seq_len=256)
    stats = legibility_stats(legible, tokens, progress=False)
    photograph(regimes_by_layer_figure(stats), "legibility_legible", 900, 420)


if __name__ == "__main__":
    main()
