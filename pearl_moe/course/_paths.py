"""Where the repository is, and how a path in it is shown to a reader."""

from __future__ import annotations

from pathlib import Path

#: The repository root (the folder that holds ``pearl_moe/``, ``notebooks/`` and ``results/``).
ROOT = Path(__file__).resolve().parent.parent.parent


def rel(path) -> str:
    """``path`` relative to the repository when it lies inside it, else as given."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
