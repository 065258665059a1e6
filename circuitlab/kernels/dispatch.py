"""Which implementation a kernel call runs: the Triton fast path or the plain-PyTorch reference.

Rules, applied per call:
- `use_backend(name)` (a context manager, innermost wins) overrides everything; otherwise the environment
  variable CIRCUITLAB_KERNELS; otherwise "auto". Under torch.compile the choice is made when the model is
  traced: entering or leaving `use_backend` retraces it, a change of $CIRCUITLAB_KERNELS does not.
- "reference": always the plain-PyTorch reference.
- "auto": Triton when triton is installed and every tensor argument is on a CUDA device and the fast path
  supports the call (e.g. a 1-D decay for the scans); the reference otherwise.
- "triton": always Triton; an error when triton is missing, when a tensor is on the CPU and the Triton
  interpreter is off (TRITON_INTERPRET=1 must be set before triton is imported), or when the call is
  outside what the fast path supports.

triton itself is imported only when a fast path actually runs, so CPU users without triton can use every
function in `circuitlab.kernels`.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import os
import warnings
from collections.abc import Iterator
from types import ModuleType

import torch

BACKENDS = ("auto", "reference", "triton")
ENV_VAR = "CIRCUITLAB_KERNELS"

_override: contextvars.ContextVar[str | None] = contextvars.ContextVar("circuitlab_kernels_backend", default=None)
# the innermost use_backend as a plain global: torch.compile cannot read context variables, but it guards on
# globals, so a compiled model is retraced when the backend it was traced under changes
_override_while_compiling: str | None = None
_TRITON_FOUND = importlib.util.find_spec("triton") is not None  # finds the package without importing it


def _validated(name: str, origin: str) -> str:
    normalised = name.strip().lower()
    if normalised not in BACKENDS:
        raise ValueError(f"{origin} = {name!r} is not a kernel backend; expected one of {', '.join(BACKENDS)}")
    return normalised


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run every circuitlab kernel inside the block on `name` ("reference", "triton" or "auto")."""
    global _override_while_compiling
    backend = _validated(name, "use_backend(name)")
    token = _override.set(backend)
    outer, _override_while_compiling = _override_while_compiling, backend
    try:
        yield
    finally:
        _override.reset(token)
        _override_while_compiling = outer


def requested_backend() -> str:
    """The backend asked for: the innermost `use_backend`, else $CIRCUITLAB_KERNELS, else "auto"."""
    override = _override_while_compiling if torch.compiler.is_compiling() else _override.get()
    if override is not None:
        return override
    return _validated(os.environ.get(ENV_VAR, "auto"), f"${ENV_VAR}")


def triton_installed() -> bool:
    return _TRITON_FOUND


def triton_interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def backend_for(*tensors: torch.Tensor, unsupported: str | None = None) -> str:
    """The backend a call on these tensors runs: "triton" or "reference".

    `unsupported` is None when the fast path can take the call, else why not (said in the error when
    Triton is forced, silently falls back under "auto")."""
    requested = requested_backend()
    if requested == "reference":
        return "reference"
    on_cuda = all(t.is_cuda for t in tensors)
    if requested == "auto":
        if on_cuda and unsupported is None and triton_installed() and not _import_failed:
            return "triton"
        return "reference"
    if not triton_installed():
        raise RuntimeError(
            "circuitlab kernels were forced to 'triton' but triton is not installed; "
            "install it (pip install 'circuitlab[triton]') or use_backend('reference')"
        )
    if not on_cuda and not triton_interpreting():
        devices = sorted({str(t.device) for t in tensors})
        raise RuntimeError(
            f"circuitlab kernels were forced to 'triton' on tensors on {devices}; Triton needs CUDA tensors, "
            "or TRITON_INTERPRET=1 set before triton is imported (CPU interpreter, slow, for tests)"
        )
    if unsupported is not None:
        raise ValueError(f"the Triton fast path cannot take this call: {unsupported}; use_backend('reference')")
    return "triton"


_import_failed = False


def fast_module(name: str) -> ModuleType | None:
    """Import circuitlab.kernels.<name> (which imports triton) on first use; None when that fails under
    "auto" (warned once, and every later call takes the reference)."""
    global _import_failed
    try:
        return importlib.import_module(f"circuitlab.kernels.{name}")
    except ImportError as error:
        if requested_backend() == "triton":
            raise
        _import_failed = True
        warnings.warn(f"circuitlab Triton kernels unavailable ({error}); using the PyTorch references", stacklevel=3)
        return None


def fast_ready(name: str) -> bool:
    """Whether the fast path in circuitlab.kernels.<name> can run: imports it eagerly (see `fast_module`);
    while torch.compile traces, only whether no import has failed (the custom operator imports it when it
    runs)."""
    if torch.compiler.is_compiling():
        return not _import_failed
    return fast_module(name) is not None


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype active on this device type, or None. The fast paths read their operands in it,
    as the references' einsums do under autocast."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None
