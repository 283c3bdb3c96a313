"""Golden files of generated code: compared byte for byte, rewritten with ``COLLC_REGEN_GOLDEN=1``."""

from __future__ import annotations

import os
from pathlib import Path

REGEN = os.environ.get("COLLC_REGEN_GOLDEN", "") not in ("", "0")


def assert_golden(generated: Path, golden: Path) -> None:
    """``generated``'s text equals ``golden``'s (or replaces it, when regenerating)."""
    text = generated.read_text()
    if REGEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"missing {golden}: run with COLLC_REGEN_GOLDEN=1 to create it"
    assert text == golden.read_text(), f"{generated.name} differs from {golden} (COLLC_REGEN_GOLDEN=1 regenerates)"
