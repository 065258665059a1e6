"""The dashboard's lookup page says which device answered the query (the CPU engines, or a GPU by name)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from demo_fixtures import build_runs

APP = str(Path(__file__).resolve().parents[2] / "apps" / "app.py")


@pytest.fixture(scope="session")
def sgatlin_run(tmp_path_factory):
    return build_runs(tmp_path_factory.getbasetemp() / "circuitlab-demo")[2]["tiny-sgatlin"]


@pytest.mark.slow
def test_the_lookup_page_names_the_device_that_served_the_query(sgatlin_run):
    app = AppTest.from_file(APP, default_timeout=120)
    app.session_state["run_path"] = str(sgatlin_run)
    app.run()
    app.switch_page("views/lookup.py")
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    captions = [str(caption.value) for caption in app.caption if str(caption.value).startswith("Served by")]
    expected = f"Served by cuda:0 ({torch.cuda.get_device_name(0)}), exact" if torch.cuda.is_available() else \
        "Served by cpu, exact, "
    assert len(captions) == 1 and captions[0].startswith(expected), captions
