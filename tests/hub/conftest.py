"""The run-folder fixture of the card tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_results import (
    AWKWARD_DATASET,
    AWKWARD_LABELS,
    results_document,
    standard_routes,
    write_results,
)


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A run folder: results.json with awkward label and dataset names, two plots, and the duo's model folder
    path recorded as `models/seed0/duo_s` (the folder itself is not created)."""
    document = results_document(standard_routes({"0": "models/seed0/duo_s"}), labels=AWKWARD_LABELS,
                                dataset=AWKWARD_DATASET)
    write_results(tmp_path / "run", document, plots=("reliability.png", "risk_coverage.png"))
    return tmp_path / "run"
