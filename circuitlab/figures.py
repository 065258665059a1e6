"""Writing figures and colouring categories, shared by the CLI and the analyses.

HTML figures reference one `plotly.min.js` written beside them (plotly's include_plotlyjs="directory"), so a
folder of figures carries plotly.js once (about 4.8 MB) instead of once per file, and opens offline.
"""

from __future__ import annotations

import colorsys
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# 26 colours that stay apart from one another (plotly's "Alphabet" qualitative palette)
_BASE_PALETTE = (
    "#AA0DFE", "#3283FE", "#85660D", "#782AB6", "#565656", "#1C8356", "#16FF32", "#F7E1A0", "#E2E2E2", "#1CBE4F",
    "#C4451C", "#DEA0FD", "#FE00FA", "#325A9B", "#FEAF16", "#F8A19F", "#90AD1C", "#F6222E", "#1CFFCE", "#2ED9FF",
    "#B10DA1", "#C075A6", "#FC1CBF", "#B00068", "#FBE426", "#FA0087",
)


def distinct_colors(n: int) -> list[str]:
    """`n` different colours: a 26-colour qualitative palette, then evenly spread hues (golden-ratio steps over
    two lightness levels) for more, so no two categories ever share a colour."""
    colors = list(_BASE_PALETTE[:n])
    hue, step = 0.11, 0.618033988749895
    while len(colors) < n:
        lightness = 0.42 if len(colors) % 2 else 0.58
        r, g, b = colorsys.hls_to_rgb(hue % 1.0, lightness, 0.75)
        color = f"#{round(r * 255):02X}{round(g * 255):02X}{round(b * 255):02X}"
        if color not in colors:
            colors.append(color)
        hue += step
    return colors


def color_map(values: Sequence[Any]) -> dict[str, str]:
    """{value: colour} for the distinct values, in sorted order (stable across figures of the same values)."""
    names = sorted({str(value) for value in values})
    return dict(zip(names, distinct_colors(len(names))))


def write_figure(figure: Any, path: str | os.PathLike) -> Path:
    """An HTML figure that loads plotly.min.js from its own folder (written there once if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.write_html(path, include_plotlyjs="directory")
    return path
