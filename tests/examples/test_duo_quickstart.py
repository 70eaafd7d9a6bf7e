"""examples/duo_quickstart.py runs end to end (one training epoch per member) and prints what it promises."""

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "duo_quickstart.py"
ROWS = ("large alone", "large, scaled T", "duo")
NUMBER = r"(-?\d+\.\d+)"


def test_duo_quickstart(tmp_path):
    output = tmp_path / "duo"
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "1", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    out = result.stdout

    metrics = {}
    for name in ROWS:
        match = re.search(rf"^{re.escape(name)}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s*$", out, re.M)
        assert match, f"no metrics row {name!r} in:\n{out}"
        metrics[name] = dict(zip(("accuracy", "nll", "ece", "aurc"), map(float, match.groups()), strict=True))
    for name, row in metrics.items():
        assert 0 <= row["accuracy"] <= 1 and row["nll"] > 0, (name, row)
        assert 0 <= row["ece"] <= 1 and 0 <= row["aurc"] <= 100, (name, row)
    # temperature scaling never changes the prediction
    assert metrics["large alone"]["accuracy"] == metrics["large, scaled T"]["accuracy"]

    temperatures = re.search(rf"T_large = {NUMBER}, T_small = {NUMBER}", out)
    assert temperatures and all(float(t) > 0 for t in temperatures.groups())

    flops = re.search(rf"large {NUMBER} M, small {NUMBER} M, duo {NUMBER} M; overhead over large: {NUMBER} %", out)
    assert flops, out
    large, small, duo, overhead = map(float, flops.groups())
    assert abs(duo - (large + small)) < 0.02 and 5 <= overhead <= 20  # a sidekick at 5-20 % of the FLOPs
    assert abs(overhead - 100 * small / large) < 0.5

    assert "reload check: OK" in out
    assert re.search(r"pipeline on one test image \(label \d\): \d \d\.\d{3}", out)
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        assert (output / name).is_file(), sorted(p.name for p in output.iterdir())
