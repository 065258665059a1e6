"""Backend choice for the kernels: reference on CPU by default, Triton on CUDA, explicit overrides.
Runs without triton installed (nothing here imports it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import circuitlab.kernels as kernels
from circuitlab.kernels import reference


@pytest.fixture(autouse=True)
def no_backend_env(monkeypatch):
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)


def test_importing_the_kernels_does_not_import_triton():
    code = "import sys, circuitlab.kernels; assert 'triton' not in sys.modules, sorted(m for m in sys.modules if 'triton' in m)"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "TRITON_INTERPRET": "0"})


def test_cpu_tensors_take_the_reference_by_default():
    x = torch.zeros(2, 3)
    assert kernels.requested_backend() == "auto"
    assert kernels.kernel_backend(x) == "reference"
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 8, generator=gen, requires_grad=True)
    indices = torch.randint(0, 4, (2, 3, 2, 3), generator=gen)
    gates = torch.randn(2, 3, 2, 3, generator=gen)
    experts = torch.randn(2, 2, 4, 8, generator=gen)
    out = kernels.sgatlin_combine(z, indices, gates, experts)
    nodes, stack = [], [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None:
            nodes.append(type(node).__name__)
            stack.extend(next_node for next_node, _ in node.next_functions)
    assert not any("circuitlab" in name for name in nodes), nodes
    # sgatlin on the CPU takes the CPU fast path (circuitlab.kernels.cpu), the reference's sums reordered
    torch.testing.assert_close(out, reference.sgatlin_combine(z, indices, gates, experts), rtol=1e-5, atol=1e-6)
    member, decay = torch.rand(2, 5, 3, generator=gen), torch.rand(3, generator=gen)
    assert torch.equal(kernels.existential_scan(member, decay), reference.existential_scan(member, decay))


def test_use_backend_nests_and_restores():
    with kernels.use_backend("triton"):
        assert kernels.requested_backend() == "triton"
        with kernels.use_backend("reference"):
            assert kernels.requested_backend() == "reference"
            assert kernels.kernel_backend(torch.zeros(1)) == "reference"
        assert kernels.requested_backend() == "triton"
    assert kernels.requested_backend() == "auto"


def test_environment_variable_selects_the_backend(monkeypatch):
    monkeypatch.setenv(kernels.ENV_VAR, "Reference")
    assert kernels.requested_backend() == "reference"
    with kernels.use_backend("auto"):  # the context manager outranks the environment
        assert kernels.requested_backend() == "auto"
    monkeypatch.setenv(kernels.ENV_VAR, "fast")
    with pytest.raises(ValueError, match="CIRCUITLAB_KERNELS"):
        kernels.requested_backend()


def test_unknown_backend_names_are_refused():
    with pytest.raises(ValueError, match="expected one of auto, reference, triton"):
        with kernels.use_backend("cuda"):
            pass


def test_forcing_triton_on_cpu_without_the_interpreter_is_an_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with kernels.use_backend("triton"), pytest.raises(RuntimeError, match="triton"):
        kernels.existential_scan(torch.rand(1, 4, 2), torch.rand(2))


def test_calls_the_fast_path_cannot_take_fall_back_under_auto_and_fail_when_forced(monkeypatch):
    member = torch.rand(2, 5, 3)
    decay_per_sequence = torch.rand(2, 1, 3)  # not one decay per unit
    assert torch.equal(
        kernels.existential_scan(member, decay_per_sequence), reference.existential_scan(member, decay_per_sequence)
    )
    assert kernels.backend_for(member, unsupported="because") == "reference"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    expected = ValueError if kernels.triton_installed() else RuntimeError
    with kernels.use_backend("triton"), pytest.raises(expected):
        kernels.existential_scan(member, decay_per_sequence)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_take_triton_unless_told_otherwise(monkeypatch):
    x = torch.zeros(2, device="cuda")
    assert kernels.kernel_backend(x) == ("triton" if kernels.triton_installed() else "reference")
    monkeypatch.setenv(kernels.ENV_VAR, "reference")
    assert kernels.kernel_backend(x) == "reference"
