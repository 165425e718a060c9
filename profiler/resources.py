"""Locate files shipped in resources/ (installed as the package memsight.resources)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGE = "memsight.resources"


def path(name: str) -> Path:
    """Filesystem path of resources/NAME."""
    return Path(str(resources.files(PACKAGE).joinpath(name)))
