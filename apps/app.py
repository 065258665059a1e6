"""circuitlab dashboard: one Streamlit app, a page per use, over a run folder made by `circuitlab demo`.

    streamlit run apps/app.py --server.address 127.0.0.1 -- --run runs/sgatlin-stories
    (or: circuitlab dashboard --run runs/sgatlin-stories)

The pages live in views/, not pages/: Streamlit treats a pages/ folder beside the entry script as the
legacy multipage layout (file names in the sidebar, pages run without this script) until st.navigation
first runs, so the first visitor would see the wrong navigation.
"""

from __future__ import annotations

import streamlit as st

from app_support import APP_TITLE, run_model_config

st.set_page_config(page_title=APP_TITLE, page_icon=":material/hub:", layout="wide")

# the pages about one design appear only for the models they describe (all of them when the run's model
# cannot be read: each page then says what it needs)
config = run_model_config()
describes = {
    "regimes": config is None or config.has_bounded_channels,
    "parity": config is None or config.bottleneck is not None,
}
PAGES = [
    st.Page("views/overview.py", title="Overview", icon=":material/home:", default=True),
    st.Page("views/lookup.py", title="Circuit lookup", icon=":material/search:"),
    st.Page("views/circuit_map.py", title="Circuit map", icon=":material/scatter_plot:"),
    st.Page("views/patching.py", title="Patching", icon=":material/swap_horiz:"),
    st.Page("views/legibility.py", title="Legibility", icon=":material/visibility:"),
    *([st.Page("views/regimes.py", title="Pressure regimes", icon=":material/tune:")] if describes["regimes"] else []),
    *([st.Page("views/parity.py", title="Parity bottleneck", icon=":material/compress:")] if describes["parity"] else []),
    st.Page("views/attribution.py", title="Attribution", icon=":material/bar_chart:"),
    st.Page("views/neurons.py", title="Neurons", icon=":material/grid_on:"),
]

st.navigation(PAGES).run()  # each page draws the sidebar's run picker itself (app_support.require_run)
