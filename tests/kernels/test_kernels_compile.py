"""The fast paths as custom operators: torch.library.opcheck on each, and torch.compile of tiny models of
every architecture with their fast paths, against the eager reference (values and gradients).

On a machine without CUDA the operators run their Triton kernels in the CPU interpreter. The compile tests
use the "aot_eager" backend (dynamo + AOTAutograd: the tracing through the operators' fake implementations
and registered backwards, which is what broke before) with fullgraph=True, so any graph break fails them;
Inductor's own code generation around the opaque operators is covered by one slow test here and by the GPU
benchmark (benchmarks/bench_gpu.py).
"""

from __future__ import annotations

import os

import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("CIRCUITLAB_KERNELS_TUNE", "0")

pytest.importorskip("triton", reason="triton is not installed: the kernel tests need it (pip install 'circuitlab[triton]')")

import circuitlab.kernels as kernels  # noqa: E402
from circuitlab.architectures.transformer import CircuitTransformer  # noqa: E402
from circuitlab.config import ModelConfig  # noqa: E402
from circuitlab.kernels import ops  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
pytestmark = pytest.mark.skipif(
    not (CUDA or kernels.triton_interpreting()), reason="no CUDA device and TRITON_INTERPRET is off"
)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _opcheck(op, args):
    with kernels.use_backend("triton"):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                                    "test_aot_dispatch_dynamic"))


def test_sgatlin_ops_pass_opcheck():
    gen = torch.Generator().manual_seed(0)
    n_tokens, channels, k, neurons, d_model = 5, 2, 3, 4, 12
    z = torch.randn(n_tokens, d_model, generator=gen).to(DEVICE).requires_grad_(True)
    indices = torch.randint(0, neurons, (n_tokens, channels * k), generator=gen).to(DEVICE)
    gates = torch.randn(n_tokens, channels * k, generator=gen).to(DEVICE).requires_grad_(True)
    experts = torch.randn(2, channels, neurons, d_model, generator=gen).to(DEVICE).requires_grad_(True)
    _opcheck(ops.sgatlin_combine_fwd, (z, indices, gates, experts, k))
    out, neuron_pre = ops.sgatlin_combine_fwd(z, indices, gates, experts, k)
    dy = torch.randn_like(out)
    detached = [t.detach() for t in (z, indices, gates, experts, neuron_pre)]
    _opcheck(ops.sgatlin_combine_bwd, (dy, *detached[:4], detached[4], k, True))
    _opcheck(ops.sgatlin_combine_bwd, (dy, *detached[:4], detached[4], k, False))
    scores = torch.randn(n_tokens, 2 * channels * 4, generator=gen).to(DEVICE).requires_grad_(True)
    _opcheck(ops.sgatlin_route_fwd, (scores, channels, k))
    route_gates, route_indices = ops.sgatlin_route_fwd(scores.detach(), channels, k)
    _opcheck(ops.sgatlin_route_bwd, (torch.randn_like(route_gates), route_indices, 4))


@pytest.mark.parametrize("is_max", [True, False])
def test_scan_ops_pass_opcheck(is_max):
    gen = torch.Generator().manual_seed(1)
    membership = torch.rand(3, 7, 5, generator=gen).to(DEVICE).requires_grad_(True)
    decay = (0.5 + 0.4 * torch.rand(5, generator=gen)).to(DEVICE).requires_grad_(True)
    _opcheck(ops.quantifier_scan_fwd, (membership, decay, is_max))
    out, won = ops.quantifier_scan_fwd(membership.detach(), decay.detach(), is_max)
    _opcheck(ops.quantifier_scan_bwd, (torch.randn_like(out), membership.detach(), decay.detach(), out, won, is_max))


def test_parity_beam_candidates_passes_opcheck():
    gen = torch.Generator().manual_seed(2)
    y = torch.randn(5, 8, 8, generator=gen).to(DEVICE)
    signs = (torch.randint(0, 2, (32, 8), generator=gen) * 2 - 1).float().to(DEVICE)
    with kernels.use_backend("triton"):
        torch.library.opcheck(ops.parity_beam_candidates, (y, signs, 8),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_parity_beam_select_passes_opcheck():
    from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table

    rows, cols = sign_table(make_factor_code(8, 5, 1)).to(DEVICE), sign_table(make_factor_code(8, 5, 2)).to(DEVICE)
    x = torch.randn(4, 8, 8, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with kernels.use_backend("triton"):
        torch.library.opcheck(ops.parity_beam_select, (x, rows, cols, 8, 8),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("mode", [(True, True, False), (True, True, True), (False, False, True)])
def test_parity_feature_solve_passes_opcheck(mode):
    from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table

    gen = torch.Generator().manual_seed(4)
    rows, cols = sign_table(make_factor_code(8, 4, 1)).to(DEVICE), sign_table(make_factor_code(8, 4, 2)).to(DEVICE)
    indices = torch.stack([torch.randperm(256, generator=gen)[:10] for _ in range(3)]).to(DEVICE)
    solve, write_a, decode = mode
    x = torch.randn(3, 64, generator=gen).to(DEVICE).requires_grad_(True) if solve else torch.empty(0, device=DEVICE)
    v = torch.randn(3, 10, generator=gen).to(DEVICE).requires_grad_(True) if not solve else torch.empty(0, device=DEVICE)
    empty = torch.empty(0, device=DEVICE)
    # a solve keeps its factors (for its backward); a later launch on the same support may be given them
    _opcheck(ops.parity_feature_solve, (x, v, indices, rows, cols, empty, 1e-3, solve, write_a, decode, solve))
    if solve:
        factors = ops.parity_feature_solve(x.detach(), v, indices, rows, cols, empty, 1e-3, True, False, True, True)[2]
        _opcheck(ops.parity_feature_solve, (x, v, indices, rows, cols, factors, 1e-3, solve, write_a, decode, False))


def test_the_operators_give_the_reference_gradients():
    """The layer-facing wrappers (reshape + operator + registered backward) against the references."""
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(2, 3, 10, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_(True)
    indices = torch.randint(0, 4, (2, 3, 2, 3), generator=gen).to(DEVICE)
    gates = torch.randn(2, 3, 2, 3, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_(True)
    experts = torch.randn(2, 2, 4, 10, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_(True)
    upstream = torch.randn(2, 3, 10, generator=gen, dtype=torch.float64).to(DEVICE)
    fast = torch.autograd.grad(ops.sgatlin_combine(z, indices, gates, experts), [z, gates, experts], upstream)
    slow = torch.autograd.grad(kernels.reference.sgatlin_combine(z, indices, gates, experts), [z, gates, experts],
                               upstream)
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the kernels compute in float32
    scores = torch.randn(2, 3, 2, 2, 5, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_(True)
    fast_indices, fast_gates = ops.sgatlin_route(scores, 3)
    ref_indices, ref_gates = kernels.reference.sgatlin_route(scores, 3)
    assert torch.equal(fast_indices, ref_indices)
    weights = torch.randn(ref_gates.shape, generator=gen, dtype=torch.float64).to(DEVICE)
    (fast_d,) = torch.autograd.grad((fast_gates * weights).sum(), [scores])
    (ref_d,) = torch.autograd.grad((ref_gates * weights).sum(), [scores])
    torch.testing.assert_close(fast_d, ref_d)


# --- torch.compile of whole models ------------------------------------------------------------------------

# presets whose every circuitlab kernel is a custom operator, compiled with the fast paths forced on
# (tiny-parity: the product encoder's fused scores and selection, and the fused least squares and decode)
FAST_PATH_PRESETS = ["tiny-sgatlin", "tiny-legible", "tiny-parity"]
# compiled on the reference paths
REFERENCE_PRESETS = ["tiny-gelu"]


def _model(preset: str) -> CircuitTransformer:
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset(preset).replace(d_vocab=64, n_layers=1))
    model.reset_parameters(seed=0)
    return model.to(DEVICE)


def _logits_and_grads(model, tokens):
    logits, aux = model(tokens, return_aux=True)
    loss = logits.float().logsumexp(-1).mean() + aux["selectivity"]
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    return logits.detach(), grads


@pytest.mark.parametrize("preset", FAST_PATH_PRESETS + REFERENCE_PRESETS)
def test_a_compiled_model_equals_the_eager_reference(preset):
    backend = "triton" if preset in FAST_PATH_PRESETS else "reference"
    model = _model(preset)
    tokens = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with kernels.use_backend("reference"):
        ref_logits, ref_grads = _logits_and_grads(model, tokens)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)  # any graph break fails the test
    with kernels.use_backend(backend):
        logits, grads = _logits_and_grads(compiled, tokens)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)
    for grad, ref_grad in zip(grads, ref_grads):
        if ref_grad is None:
            assert grad is None or not grad.any()
            continue
        torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-5)


class GraphRecorder:
    """A torch.compile backend that runs the graph eagerly and records the operators of each graph."""

    def __init__(self):
        self.graphs: list[list[str]] = []

    def __call__(self, graph_module, example_inputs):
        self.graphs.append([str(node.target) for node in graph_module.graph.nodes if node.op == "call_function"])
        return graph_module.forward


def test_the_compiled_fast_path_runs_the_custom_operators_and_use_backend_retraces():
    model = _model("tiny-sgatlin")
    recorder = GraphRecorder()
    compiled = torch.compile(model, backend=recorder, fullgraph=True)
    tokens = torch.zeros(1, 4, dtype=torch.long, device=DEVICE)
    with kernels.use_backend("triton"):
        fast = compiled(tokens)
    assert len(recorder.graphs) == 1
    assert any("circuitlab.sgatlin_combine_fwd" in name for name in recorder.graphs[0]), recorder.graphs[0]
    assert any("circuitlab.sgatlin_route_fwd" in name for name in recorder.graphs[0]), recorder.graphs[0]
    with kernels.use_backend("reference"):
        slow = compiled(tokens)
    assert len(recorder.graphs) == 2, "leaving use_backend('triton') must retrace the model"
    assert not any("circuitlab" in name for name in recorder.graphs[1]), recorder.graphs[1]
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("beam, selection", [(8, "parity_beam_select"), (40, "parity_beam_candidates")])
def test_the_compiled_parity_model_runs_the_fused_encoder_operator(beam, selection):
    """Up to beam 32 the whole beam search is one operator; a wider beam is chosen in the graph and scored by one."""
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny-parity")
    bottleneck = config.bottleneck.model_dump() | {"n_bits": 11, "col_bits": 6, "beam": beam}
    model = CircuitTransformer(config.replace(d_vocab=64, n_layers=1, bottleneck=bottleneck))
    model.reset_parameters(seed=0)
    model = model.to(DEVICE)
    recorder = GraphRecorder()
    compiled = torch.compile(model, backend=recorder, fullgraph=True)
    tokens = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(6)).to(DEVICE)
    with kernels.use_backend("triton"):
        fast = compiled(tokens)
    assert any(f"circuitlab.{selection}." in name for name in recorder.graphs[0]), recorder.graphs[0]
    assert any("circuitlab.parity_feature_solve" in name for name in recorder.graphs[0]), recorder.graphs[0]
    with kernels.use_backend("reference"):
        torch.testing.assert_close(fast, model(tokens), rtol=1e-4, atol=1e-5)


def test_hooks_run_on_the_uncompiled_model_beside_a_compiled_one():
    """torch.compile does not guard on module hooks (torch._dynamo.config.skip_nnmodule_hook_guards), so hooks
    belong on the uncompiled model, which shares the compiled one's parameters: it still takes the hooked path
    and gives the same logits."""
    model = _model("tiny-sgatlin")
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    tokens = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with kernels.use_backend("triton"):
        compiled_logits = compiled(tokens)
        logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_neuron_pre"))
    assert cache["blocks.0.mlp.hook_neuron_pre"].shape == (1, 5, 2, 4)
    torch.testing.assert_close(logits, compiled_logits, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_inductor_compiles_the_sgatlin_model_with_its_fast_paths():
    model = _model("tiny-sgatlin")
    tokens = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    with kernels.use_backend("reference"):
        ref_logits, ref_grads = _logits_and_grads(model, tokens)
    with kernels.use_backend("triton"):
        logits, grads = _logits_and_grads(torch.compile(model, fullgraph=True), tokens)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)
    for grad, ref_grad in zip(grads, ref_grads):
        torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-5)
