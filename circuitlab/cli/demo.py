"""`circuitlab demo` and `circuitlab dashboard`: every analysis of a model cached in a run folder, and the
Streamlit dashboard that reads it.

    circuitlab demo [MODEL] [--corpus FILE|DIR] [--pairs FILE] [--runs runs] [--name NAME] [--fast] [--no-serve]
    circuitlab dashboard [--run runs/<name>] [--host 127.0.0.1] [--port 8501]
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import re
import sys
from pathlib import Path
from typing import Any

from circuitlab.demo.runfolder import DEFAULT_MODEL, DEFAULT_RUNS
from circuitlab.errors import UserError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501


def app_path() -> Path:
    """The dashboard's entry script: in the installed package (the wheel carries apps/ as circuitlab/apps/),
    else in the source tree's apps/ folder."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "apps" / "app.py"
    return installed if installed.is_file() else package.parent / "apps" / "app.py"


APP_PATH = app_path()


def _check_host(host: str) -> str:
    if not isinstance(host, str) or not host or len(host) > 253 or not re.fullmatch(r"[A-Za-z0-9.:\-\[\]]+", host):
        raise UserError(f"--host {host!r} is not a host name or IP address (default {DEFAULT_HOST}, localhost only)")
    return host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def dashboard_command(run_path: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> list[str]:
    """The streamlit command line that serves the dashboard on `run_path`."""
    _check_host(host)
    if not 1 <= int(port) <= 65535:
        raise UserError(f"--port {port} must lie in 1..65535")
    return [
        sys.executable, "-m", "streamlit", "run", str(APP_PATH),
        "--server.address", host, "--server.port", str(int(port)), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal", "--", "--run", str(run_path),
    ]


def port_in_use(host: str, port: int) -> bool:
    """Whether something already accepts connections on host:port."""
    import socket

    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def _end_process_group(process: Any, grace_s: float = 5.0) -> None:
    """SIGTERM to the dashboard's whole process group (streamlit and anything it started), SIGKILL after
    `grace_s` if it is still there."""
    import os
    import signal
    import subprocess

    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class _Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def serve(run_path: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, start_timeout_s: float = 120.0) -> int:
    """Serve the dashboard until interrupted (Ctrl-C, SIGINT or SIGTERM end streamlit and its children too).

    The banner is printed only once the port accepts connections, so a port taken by another program is an
    error, not an address that shows someone else's page.
    """
    import signal
    import subprocess
    import time

    if importlib.util.find_spec("streamlit") is None:
        raise UserError("the dashboard needs streamlit: pip install 'circuitlab[apps]' (or use --no-serve)")
    app = app_path()
    if not app.is_file():
        raise UserError(f"{app} not found: this circuitlab installation lacks the dashboard's apps/ folder")
    command = dashboard_command(run_path, host, port)
    if port_in_use(host, port):
        raise UserError(f"port {port} on {host} is already in use (another dashboard?): stop it or choose --port")
    if not is_loopback(host):
        print(f"warning: serving on {host}: the dashboard is reachable from other machines", file=sys.stderr)

    def stop(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    process = subprocess.Popen(command, start_new_session=True)  # its own process group, ended as one below
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, stop) for sig in handled}
    try:
        deadline = time.monotonic() + start_timeout_s
        while not port_in_use(host, port):
            if process.poll() is not None:
                raise UserError(f"the dashboard exited with status {process.returncode} before serving on port {port}")
            if time.monotonic() > deadline:
                raise UserError(f"the dashboard did not start serving on port {port} within {start_timeout_s:.0f} s")
            time.sleep(0.1)
        shown = f"[{host}]" if ":" in host else host
        print(f"dashboard for {run_path} at http://{shown}:{port}  (Ctrl-C stops it)", flush=True)
        return process.wait()
    except (_Stopped, KeyboardInterrupt) as stopped:
        return 128 + (stopped.signum if isinstance(stopped, _Stopped) else signal.SIGINT)
    finally:
        _end_process_group(process)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def demo(args: argparse.Namespace) -> int:
    import torch

    with torch.no_grad():  # scoped: demo() also runs inside other programs (tests, notebooks)
        return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    from circuitlab.architectures.weights import resolve_model_folder
    from circuitlab.architectures.transformer import load_model
    from circuitlab.demo.pipeline import DemoInputs, Sizes, run_pipeline
    from circuitlab.demo.runfolder import (
        RunFolder, check_run_name, demo_run_folder, model_identity,
    )

    if args.name:
        check_run_name(args.name)  # before the model loads: a bad name fails at once
    inputs = DemoInputs.from_paths(args.corpus, args.pairs)
    folder = resolve_model_folder(args.model)
    model = load_model(folder)
    run_path = demo_run_folder(args.runs, args.model, folder, args.name)
    run_path.mkdir(parents=True, exist_ok=True)
    run = RunFolder(run_path)
    identity = model_identity(model, args.model, folder)
    sizes = Sizes.fast() if args.fast else Sizes()
    print(f"circuitlab demo: {args.model} -> {run_path}{' (fast)' if args.fast else ''}")
    report = run_pipeline(model, run, identity, sizes, progress=not args.quiet, inputs=inputs)
    made = ", ".join(report.computed) or "nothing (every artifact was cached)"
    print(f"made {made} in {report.total_seconds:.1f} s; run folder {run_path}")
    if args.no_serve:
        return 0
    return serve(run_path, args.host, args.port)


def dashboard(args: argparse.Namespace) -> int:
    from circuitlab.demo.runfolder import RunFolder

    run_path = Path(args.run)
    RunFolder.open(run_path)
    return serve(run_path, args.host, args.port)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run every analysis of a model into a run folder (cached), then open the dashboard",
        description="Collect circuits over a held-out corpus (generated stories, or your own text with --corpus), "
        "build the circuit database, UMAP maps, neuron usage, NIE (fact pairs, or your own with --pairs), "
        "legibility where it applies and DLA of a few prompts, caching every artifact under RUNS/<name>; then "
        "serve the dashboard on localhost. A run folder is never the model's folder.",
    )
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                        help=f"shipped model name or model folder (default: {DEFAULT_MODEL})")
    parser.add_argument("--corpus", default=None, metavar="FILE|DIR",
                        help="analyse the model on this text (a .txt/.jsonl file or a folder of them) instead of "
                             "generated stories; its first 400 documents (40 with --fast) are used")
    parser.add_argument("--pairs", default=None, metavar="FILE",
                        help="patching pairs for the NIE artifact, in the JSON pair format (README, 'patching "
                             "pairs'); default: the shipped fact pairs when the tokenizer has them")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help=f"folder holding run folders (default: {DEFAULT_RUNS})")
    parser.add_argument("--name", default=None,
                        help="run folder name (default: the model's name, or NAME-demo when RUNS/NAME is the model)")
    parser.add_argument("--fast", action="store_true", help="small samples (tests and CI)")
    parser.add_argument("--no-serve", action="store_true", help="stop after making the artifacts")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--host", type=_check_host, default=DEFAULT_HOST,
                        help=f"address the dashboard binds to (default: {DEFAULT_HOST}, this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"dashboard port (default: {DEFAULT_PORT})")
    parser.set_defaults(func=demo)

    board = subparsers.add_parser("dashboard", help="serve the dashboard on an existing run folder")
    board.add_argument("--run", default=str(Path(DEFAULT_RUNS) / DEFAULT_MODEL),
                       help=f"run folder made by `circuitlab demo` (default: {Path(DEFAULT_RUNS) / DEFAULT_MODEL})")
    board.add_argument("--host", type=_check_host, default=DEFAULT_HOST,
                       help=f"address to bind (default: {DEFAULT_HOST}, this machine only)")
    board.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    board.set_defaults(func=dashboard)
