"""The studies' tests: ``pytest experiments/tests`` (the default ``pytest`` collects ``tests/``
only). They pin the numbers ``experiments/README.md`` states, read from the committed data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # experiments/analysis.py
