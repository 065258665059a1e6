"""circuitlab dashboard: one Streamlit app, a page per use, over a run folder made by `circuitlab demo`.

    streamlit run apps/app.py --server.address 127.0.0.1 -- --run runs/sgatlin-stories
    (or: circuitlab dashboard --run runs/sgatlin-stories)
"""

from __future__ import annotations

import streamlit as st

from app_support import APP_TITLE, sidebar_run_picker

st.set_page_config(page_title=APP_TITLE, page_icon=":material/hub:", layout="wide")

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/home:", default=True),
    st.Page("pages/lookup.py", title="Circuit lookup", icon=":material/search:"),
    st.Page("pages/circuit_map.py", title="Circuit map", icon=":material/scatter_plot:"),
    st.Page("pages/patching.py", title="Patching", icon=":material/swap_horiz:"),
    st.Page("pages/legibility.py", title="Legibility", icon=":material/visibility:"),
    st.Page("pages/attribution.py", title="Attribution", icon=":material/bar_chart:"),
    st.Page("pages/neurons.py", title="Neurons", icon=":material/grid_on:"),
]

navigation = st.navigation(PAGES)
st.sidebar.markdown(f"**{APP_TITLE}**")
sidebar_run_picker()
navigation.run()
