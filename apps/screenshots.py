"""Serve the dashboard on a free localhost port and photograph its pages with headless Chromium.

    python apps/screenshots.py --run runs/sgatlin-stories --out docs/screenshots [--pages overview lookup ...]

Used by scripts/screenshots.sh (README images) and by the browser test. Each page is loaded in headless
Chromium and photographed once its title and a marker of its content are on the page and the app has
stopped running (see Browser).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
TITLE = "circuitlab dashboard"
# url path -> text that appears once the page has rendered its content
PAGES = {
    "overview": "Artifacts of this run",
    "lookup": "Neighbours with their contexts",
    "circuit_map": "Do neighbouring circuits share a meaning?",
    "patching": "Your own pair",
    "legibility": "Bounded channels take values",
    "attribution": "Demo prompts",
    "neurons": "Over the held-out corpus",
}
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def served(run: Path, port: int | None = None, timeout: float = 120.0, log: Path | None = None) -> Iterator[str]:
    """The dashboard on 127.0.0.1 for the duration of the block; yields its base URL."""
    from circuitlab.cli.demo import dashboard_command

    port = port or free_port()
    command = dashboard_command(run, "127.0.0.1", port)  # what `circuitlab dashboard` runs
    command[command.index("--"):command.index("--")] = ["--server.fileWatcherType", "none"]
    log_handle = open(log, "w") if log else subprocess.DEVNULL
    process = subprocess.Popen(command, stdout=log_handle, stderr=subprocess.STDOUT, cwd=APP.parent.parent)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the dashboard server exited with status {process.returncode} (log: {log})")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as answer:
                    if answer.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the dashboard did not answer on {base} within {timeout:.0f} s (log: {log})")
            time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            log_handle.close()


class Browser:
    """Headless Chromium driven over the DevTools protocol (websockets ships with streamlit).

    Chromium's --screenshot with --virtual-time-budget shoots when virtual time runs out, which races the
    dashboard's websocket (its content arrives after the page has loaded); here the page is polled in real
    time until its content is there and the app has stopped running, then photographed.
    """

    def __init__(self, profile: Path, window: str = "1400,900", timeout: float = 60.0):
        binary = chromium_binary()
        if binary is None:
            raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
        self.width, self.height = (int(v) for v in window.split(","))
        self.timeout = timeout
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "DevToolsActivePort").unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={window}",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.is_file() and port_file.read_text().count("\n") >= 1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as answer:
                    targets = [t for t in json.loads(answer.read()) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium opened no page target")
            time.sleep(0.2)
        from websockets.sync.client import connect

        self._connection = contextlib.ExitStack()
        self.socket = self._connection.enter_context(
            connect(targets[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=timeout)
        )
        self.next_id = 0
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=self.timeout))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str, marker: str, settle: float = 2.0) -> str:
        """Load `url`; wait until the title and `marker` are there and the app has finished running; the DOM."""
        self.call("Page.navigate", url=url)
        return self.wait_for(marker, settle)

    def wait_for(self, marker: str, settle: float = 2.0) -> str:
        """Wait until the title and `marker` are there and the app has finished running; the DOM."""
        deadline = time.monotonic() + self.timeout
        calm_since = None
        while time.monotonic() < deadline:
            state = self.evaluate(
                "JSON.stringify({title: document.title, text: document.body ? document.body.innerText : '',"
                " running: !!document.querySelector('[data-testid=\"stStatusWidget\"]'),"
                " skeleton: !!document.querySelector('[data-testid=\"stSkeleton\"]')})"
            )
            state = json.loads(state or "{}")
            ready = state.get("title") == TITLE and marker in state.get("text", "") and not state.get("running") and not state.get("skeleton")
            calm_since = (calm_since or time.monotonic()) if ready else None
            if calm_since and time.monotonic() - calm_since >= settle:  # plotly draws after the elements arrive
                return self.evaluate("document.documentElement.outerHTML")
            time.sleep(0.25)
        raise TimeoutError(f"the page did not show {marker!r} within {self.timeout:.0f} s")

    def fill(self, label: str, text: str) -> None:
        """Type `text` into the text input labelled `label`, replacing what it held."""
        found = self.evaluate(
            f"(() => {{ const box = document.querySelector('input[aria-label={json.dumps(label)}]');"
            " if (!box) return false; box.focus(); box.select(); return true; })()"
        )
        if not found:
            raise LookupError(f"no text input labelled {label!r}")
        self.call("Input.insertText", text=text)

    def click(self, button: str, marker: str, settle: float = 2.0) -> str:
        """Click the button labelled `button`; wait until `marker` shows and the app has stopped; the DOM."""
        clicked = self.evaluate(
            "(() => { const b = Array.from(document.querySelectorAll('button'))"
            f".find(x => x.innerText.trim() === {json.dumps(button)}); if (!b) return false; b.click(); return true; }})()"
        )
        if not clicked:
            raise LookupError(f"no button {button!r}")
        return self.wait_for(marker, settle)

    def plots(self) -> list[dict]:
        """Each plotly figure on the page as drawn: axis types, tick labels, trace x values, title."""
        return json.loads(self.evaluate(
            "JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => ({"
            " xtype: g._fullLayout.xaxis.type, ytype: g._fullLayout.yaxis.type,"
            " xticks: Array.from(g.querySelectorAll('.xtick text')).map(t => t.textContent),"
            " yticks: Array.from(g.querySelectorAll('.ytick text')).map(t => t.textContent),"
            " x: g.data[0].x, title: g._fullLayout.title.text})))"
        ) or "[]")

    def overlapping_labels(self) -> list[tuple[str, str]]:
        """Pairs of labels drawn over each other in a plotly figure: titles, subplot titles, axis titles and
        colour bars, by their on-screen boxes (a few pixels of touching allowed)."""
        return [tuple(pair) for pair in json.loads(self.evaluate(
            "JSON.stringify((() => { const found = [];"
            " document.querySelectorAll('.js-plotly-plot').forEach((g, figure) => {"
            "  const parts = [];"
            "  g.querySelectorAll('.annotation, .g-gtitle, [class^=\"g-x\"][class$=\"title\"], [class^=\"g-y\"][class$=\"title\"], .colorbar')"
            "   .forEach(e => { const r = e.getBoundingClientRect(); if (r.width > 0 && r.height > 0)"
            "    parts.push({name: `figure ${figure} ${e.getAttribute('class')}: ${(e.textContent || '').slice(0, 40)}`, r}); });"
            "  for (let i = 0; i < parts.length; i++) for (let j = i + 1; j < parts.length; j++) {"
            "   const a = parts[i].r, b = parts[j].r, slack = 2;"
            "   if (a.left < b.right - slack && b.left < a.right - slack && a.top < b.bottom - slack && b.top < a.bottom - slack)"
            "    found.push([parts[i].name, parts[j].name]); } });"
            " return found; })())"
        ) or "[]")]

    def screenshot(self, out: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        connection = getattr(self, "_connection", None)
        if connection is not None:
            connection.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def page_text(dom: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", dom))


def photograph(run: Path, out_dir: Path, pages: list[str], window: str = "1400,1000") -> list[Path]:
    written = []
    with tempfile.TemporaryDirectory(prefix="circuitlab-chromium-") as profile, served(run, log=out_dir / "server.log") as base, \
            Browser(Path(profile), window=window, timeout=120) as browser:
        for page in pages:
            browser.open(f"{base}/{'' if page == 'overview' else page}", PAGES[page])
            written.append(browser.screenshot(out_dir / f"{page}.png"))
            print(f"wrote {written[-1]}")
    (out_dir / "server.log").unlink(missing_ok=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="run folder made by `circuitlab demo`")
    parser.add_argument("--out", default="docs/screenshots", help="folder for the PNG files")
    parser.add_argument("--pages", nargs="*", default=list(PAGES), choices=list(PAGES))
    parser.add_argument("--window", default="1400,1000", help="browser window WIDTH,HEIGHT")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    photograph(Path(args.run).resolve(), Path(args.out), args.pages, args.window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
