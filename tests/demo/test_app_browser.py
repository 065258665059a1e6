"""The dashboard served as `circuitlab dashboard` serves it, on a free localhost port, and rendered by
headless Chromium: other interfaces refuse the port, the page title is in the DOM, the Overview's content
renders, and a PNG screenshot of the window is written."""

from __future__ import annotations

import importlib.util
import socket
import struct
from pathlib import Path

import pytest

from demo_fixtures import build_runs

SCREENSHOTS = Path(__file__).resolve().parents[2] / "apps" / "screenshots.py"


def _screenshots_module():
    spec = importlib.util.spec_from_file_location("dashboard_screenshots", SCREENSHOTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _other_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (the one a default route would use), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.254.254.254", 1))  # no packet is sent: this only picks the outgoing interface
            address = probe.getsockname()[0]
        except OSError:
            return []
    return [] if address.startswith("127.") or address == "0.0.0.0" else [address]


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory):
    return build_runs(tmp_path_factory.getbasetemp() / "circuitlab-demo")


@pytest.mark.slow
def test_chromium_renders_the_dashboard_and_writes_a_screenshot(demo_runs, tmp_path):
    shots = _screenshots_module()
    if shots.chromium_binary() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; scripts/test.sh installs it)")
    _, _, runs = demo_runs
    profile = tmp_path / "profile"
    with shots.served(runs["tiny-sgatlin"], log=tmp_path / "server.log") as base, \
            shots.Browser(profile, window="1400,900", timeout=120) as browser:
        assert base.startswith("http://127.0.0.1:")
        port = int(base.rsplit(":", 1)[1])
        for address in _other_addresses():  # bound to loopback only: other interfaces refuse the port
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.settimeout(2)
                assert probe.connect_ex((address, port)) != 0, f"the dashboard answers on {address}"
        dom = browser.open(base + "/", shots.PAGES["overview"])
        png = browser.screenshot(tmp_path / "overview.png")
    assert "<title>circuitlab dashboard</title>" in dom
    text = shots.page_text(dom)
    assert "Model card" in text and "active parameters per token" in text
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    width, height = struct.unpack(">II", header[16:24])
    assert (width, height) == (1400, 900)
    assert png.stat().st_size > 20_000  # a rendered page, not a blank window


@pytest.mark.slow
def test_your_own_pair_heatmap_has_a_cell_per_position_and_the_all_column(demo_runs, tmp_path):
    """Plotly types an axis of "0", "1", ... labels as numbers unless told otherwise: "all" then vanished and
    the cells slid off their ticks in the dashboard. Drawn by Chromium, every position and "all" is a tick."""
    from circuitlab import load_model
    from circuitlab.demo.inputs import custom_patch_pair

    shots = _screenshots_module()
    if shots.chromium_binary() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; scripts/test.sh installs it)")
    _, models, runs = demo_runs
    typed = {"Clean prompt": "Tom saw the dog and", "Clean answer": "the",
             "Counterfactual prompt": "Sue saw the cat and", "Counterfactual answer": "a"}
    pair, positions, message = custom_patch_pair(load_model(models["tiny-sgatlin"]), typed["Clean prompt"],
                                                 typed["Counterfactual prompt"], typed["Clean answer"], typed["Counterfactual answer"])
    assert message is None and positions[-1] == "all" and len(positions) > 3
    with shots.served(runs["tiny-sgatlin"], log=tmp_path / "server.log") as base, \
            shots.Browser(tmp_path / "profile", window="1400,1000", timeout=120) as browser:
        browser.open(base + "/patching", shots.PAGES["patching"])
        for label, text in typed.items():
            browser.fill(label, text)
        browser.click("Patch", "m(counterfactual)")
        figure = [plot for plot in browser.plots() if "your pair" in plot["title"]]
    assert len(figure) == 1
    assert figure[0]["xtype"] == "category" and figure[0]["ytype"] == "category"
    assert figure[0]["xticks"] == [str(p) for p in positions]
    assert figure[0]["yticks"] == ["layer 0", "layer 1", "all layers"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny-sgatlin", "tiny-parity"])
def test_no_figure_draws_a_label_over_another(demo_runs, tmp_path, model):
    """Every page as Chromium draws it at the dashboard's width: no title, subplot title, axis title or colour
    bar of a figure overlaps another (the Neurons page's colour bar once sat on an axis title)."""
    shots = _screenshots_module()
    if shots.chromium_binary() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; scripts/test.sh installs it)")
    _, _, runs = demo_runs
    overlaps, drawn = {}, 0
    with shots.served(runs[model], log=tmp_path / "server.log") as base, \
            shots.Browser(tmp_path / "profile", window="1400,1000", timeout=180) as browser:
        for page, marker in shots.PAGES.items():
            browser.open(f"{base}/{'' if page == 'overview' else page}", marker)
            drawn += len(browser.plots())
            if browser.overlapping_labels():
                overlaps[page] = browser.overlapping_labels()
    assert drawn >= 6  # the check looked at figures, not at empty pages
    assert overlaps == {}
