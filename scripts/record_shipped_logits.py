"""Record the shipped models' logits on a fixed token grid into tests/data/shipped_model_logits.json, which
tests/architectures/test_hook_semantics.py compares against: run it once when a shipped model is replaced
(the test then pins the new weights and the forward pass).

    python scripts/record_shipped_logits.py                      # every shipped model
    python scripts/record_shipped_logits.py parity-stories       # one model, the others' entries kept
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET = ROOT / "tests" / "data" / "shipped_model_logits.json"
SHIPPED = ["gelu-stories", "legible-stories", "parity-stories", "sgatlin-stories"]


def main(argv: list[str]) -> int:
    import torch

    from circuitlab import load_model

    recorded = json.loads(TARGET.read_text()) if TARGET.is_file() else {}
    recorded.setdefault("tokens", "torch.arange(3, 27).reshape(2, 12) * 37 % d_vocab")
    for name in argv or SHIPPED:
        model = load_model(name)
        tokens = torch.arange(3, 27).reshape(2, 12) * 37 % model.config.d_vocab
        with torch.no_grad():
            logits = model(tokens)
        recorded.setdefault("argmax", {})[name] = logits.argmax(-1).tolist()
        recorded.setdefault("logits_at_last_position_first_16", {})[name] = logits[:, -1, :16].tolist()
        print(f"recorded {name}")
    TARGET.write_text(json.dumps(recorded, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
