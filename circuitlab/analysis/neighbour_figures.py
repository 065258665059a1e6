"""Nearest-circuit results for people: seed 000's table 3 as text and its figure 6 as a heatmap.

    hits = db.search("Max had a red collar", layer=2, k=10)
    print(format_hits(hits))
    neighbour_heatmap(hits).show()
"""

from __future__ import annotations

import numpy as np

TOKEN_MARKS = ("«", "»")


def mark_token(context: str, start: int, end: int, marks: tuple[str, str] = TOKEN_MARKS) -> str:
    """The excerpt with its token wrapped in marks (leading whitespace of the token stays outside)."""
    start, end = int(start), int(end)
    while start < end and context[start].isspace():
        start += 1
    return f"{context[:start]}{marks[0]}{context[start:end]}{marks[1]}{context[end:]}"


def format_hits(hits, max_context: int = 64, marks: tuple[str, str] = TOKEN_MARKS) -> str:
    """A plain-text table in the layout of seed 000, table 3 (one block of k rows per query token)."""
    lines = [f"{'Pos':>4}  {'Token':<12} {'Distance':>9}  {'Neighbour input excerpt':<{max_context}}  Neighbour top predictions"]
    previous = None
    for row in hits.itertuples(index=False):
        excerpt = mark_token(row.context_plain, row.token_start, row.token_end, marks)
        excerpt = _fit(excerpt, max_context, marks)
        first = row.query_position != previous
        previous = row.query_position
        position = f"{row.query_position:>4}" if first else " " * 4
        token = repr(row.query_token)[1:-1] if first else ""
        predictions = str(row.top_predictions).replace("\n", "\\n").replace("\r", "\\r")
        lines.append(f"{position}  {token:<12.12} {row.distance:9.2e}  {excerpt:<{max_context}}  {predictions}")
    return "\n".join(lines)


def _fit(excerpt: str, width: int, marks: tuple[str, str]) -> str:
    """Cut a long excerpt around its marked token."""
    excerpt = excerpt.replace("\n", " ")
    if len(excerpt) <= width:
        return excerpt
    centre = excerpt.find(marks[0])
    start = max(0, min(centre - width // 2, len(excerpt) - width))
    return excerpt[start : start + width]


def neighbour_heatmap(hits, title: str | None = None):
    """Seed 000, figure 6: one column per query token, one row per neighbour rank, colour = distance,
    each cell labelled with the neighbour's token (hover: its excerpt and the model's top predictions)."""
    import plotly.graph_objects as go

    positions = sorted(hits["query_position"].unique())
    k = int(hits["rank"].max()) if len(hits) else 0
    z = np.full((k, len(positions)), np.nan)
    text = [["" for _ in positions] for _ in range(k)]
    hover = [["" for _ in positions] for _ in range(k)]
    column = {position: i for i, position in enumerate(positions)}
    labels = {}
    for row in hits.itertuples(index=False):
        c, r = column[row.query_position], int(row.rank) - 1
        z[r, c] = row.distance
        text[r][c] = str(row.token).strip() or repr(str(row.token))
        hover[r][c] = f"{row.context}<br>distance {row.distance:.3g}<br>predicts: {row.top_predictions}"
        labels[row.query_position] = f"{row.query_position}: {str(row.query_token).strip() or repr(str(row.query_token))}"
    figure = go.Figure(
        go.Heatmap(
            z=z, x=[labels[p] for p in positions], y=list(range(1, k + 1)), text=text, texttemplate="%{text}",
            customdata=hover, hovertemplate="%{customdata}<extra></extra>", colorscale="Viridis_r",
            colorbar={"title": "cosine<br>distance"},
        )
    )
    layer = hits["layer"].iloc[0] if "layer" in hits and len(hits) else None
    figure.update_layout(
        title=title or (f"Nearest circuits, layer {layer}" if layer is not None else "Nearest circuits"),
        xaxis_title="query token", yaxis_title="neighbour rank", yaxis_autorange="reversed",
        width=max(500, 70 * len(positions) + 200), height=max(350, 40 * k + 150),
    )
    return figure
