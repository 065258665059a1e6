"""The house rules of docs/architecture.md, checked on the source: layers that point down, no import circles,
one job per module (at most 500 lines), no dated numbers in the package, and no design known by name outside
circuitlab/architectures/."""

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "circuitlab"

# lowest first: (groups, whether the groups of the layer may import each other). A module may import its own
# group, the other groups of its layer where the layer allows it, and every lower layer (docs/architecture.md).
LAYERS = [
    (["circuitlab", "circuitlab.errors", "circuitlab.atomic", "circuitlab.codes", "circuitlab.figures", "circuitlab.stats",
      "circuitlab.presets", "circuitlab.distributed"], True),
    (["circuitlab.kernels", "circuitlab.data"], False),
    (["circuitlab.architectures.design", "circuitlab.architectures.code_layer", "circuitlab.architectures.components",
      "circuitlab.architectures.feedforward", "circuitlab.architectures.attention",
      "circuitlab.architectures.bottleneck", "circuitlab.architectures.registry"], True),
    (["circuitlab.config", "circuitlab.flops"], True),
    (["circuitlab.architectures"], True),
    (["circuitlab.training", "circuitlab.analysis"], False),
    (["circuitlab.claims", "circuitlab.demo"], False),
    (["circuitlab.cli", "circuitlab.__main__"], True),
]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every circuitlab module `name` imports, at module level or inside functions (TYPE_CHECKING included)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != name:
                found.add(target)
    return found


def layer_of(name: str) -> tuple[int, str]:
    best = None
    for index, (groups, _) in enumerate(LAYERS):
        for group in groups:
            if (name == group or name.startswith(group + ".")) and (best is None or len(group) > len(best[1])):
                best = (index, group)
    assert best is not None, f"{name} belongs to no layer of docs/architecture.md"
    return best


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_import_circles(graph):
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node, counter=[0]):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert circles == []


def test_imports_point_down(graph):
    upward = []
    for name, targets in graph.items():
        layer, group = layer_of(name)
        for target in targets:
            target_layer, target_group = layer_of(target)
            peers = LAYERS[layer][1]
            if target_layer > layer or (target_layer == layer and target_group != group and not peers):
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_every_package_module_is_at_most_500_lines():
    long = {str(path.relative_to(ROOT)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}


def test_no_dated_numbers_in_the_package():
    dated = [f"{path.relative_to(ROOT)}:{number}" for path in PACKAGE.rglob("*.py")
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if re.search(r"20\d\d-[01]\d-[0-3]\d", line)]
    assert dated == []


def test_no_design_is_known_by_name_outside_architectures():
    from circuitlab.architectures import registry

    names = "|".join(sorted({*registry.FEEDFORWARDS, *registry.VALUE_MODES, *registry.BOTTLENECKS} - {"standard"}))
    by_name = re.compile(rf"""(type|value_mode|design|kind)\s*(==|!=|in)\s*\(?\s*["']({names})["']""")
    classes = re.compile(r"isinstance\([^)]*\b(MLP|SwiGLU|Sgatlin|NCFFN|PEER|MoE|ParityBottleneck|Attention)\b")
    found = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "apps").rglob("*.py")]:
        if (PACKAGE / "architectures") in path.parents:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if by_name.search(line) or classes.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
