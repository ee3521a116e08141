"""Where the shared L-Town dev data set lives: beside the checkout (``../shared``), or at
``/work/shared`` when the checkout is a clone elsewhere (as CI makes)."""
from __future__ import annotations

from pathlib import Path

_BESIDE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ltown-leak-dev"
LTOWN = _BESIDE if _BESIDE.exists() else Path("/work/shared/data/ltown-leak-dev")
DELAY_DEV = LTOWN.parent / "ltown-delay-dev"
SHAPE_DEV = LTOWN.parent / "shape-dev"
