"""Writing figures and colouring categories, shared by the CLI and the analyses.

HTML figures reference one `plotly.min.js` written beside them (plotly's include_plotlyjs="directory"), so a
folder of figures carries plotly.js once (about 4.8 MB) instead of once per file, and opens offline. The
repository does not carry that file beside its committed figures; `python -m circuitlab.figures FOLDER ...`
writes it there from the installed plotly.
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


PNG_ATTEMPTS = 2  # a render can fail once on a loaded machine (the browser starting too slowly); a second try
# then succeeds, while a machine without kaleido or a browser fails both at once


def write_png(figure: Any, path: str | os.PathLike) -> Path | None:
    """Write a PNG of a plotly figure with kaleido (plotly's own export), which drives a Chrome or Chromium
    installed on the machine; None when no browser is found or rendering fails twice (the caller keeps its
    HTML)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".png.tmp")
    for _ in range(PNG_ATTEMPTS):
        try:
            figure.write_image(temporary, format="png", scale=2)
        except Exception:  # kaleido absent, no browser, or a failed render: kaleido raises several types
            temporary.unlink(missing_ok=True)
            continue
        os.replace(temporary, path)
        return path
    return None


def write_plotly_js(folder: str | os.PathLike) -> Path:
    """Write the installed plotly's `plotly.min.js` into `folder`, where HTML figures written by `write_figure`
    look for it (atomically; an existing file is replaced, so it matches the installed plotly)."""
    from plotly.offline import get_plotlyjs

    from circuitlab.atomic import atomic_write_text

    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder")
    target = folder / "plotly.min.js"
    atomic_write_text(target, get_plotlyjs())
    return target


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m circuitlab.figures",
        description="Write plotly.min.js beside committed HTML figures so that they open offline.")
    parser.add_argument("folders", nargs="+", type=Path, help="folders holding HTML figures")
    args = parser.parse_args(argv)
    missing = [str(folder) for folder in args.folders if not folder.is_dir()]
    if missing:
        parser.error(f"not a folder: {', '.join(missing)}")
    for folder in args.folders:
        print(f"wrote {write_plotly_js(folder)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
