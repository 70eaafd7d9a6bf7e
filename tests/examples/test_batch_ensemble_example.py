"""examples/batch_ensemble_vit.py runs end to end (one training epoch each) and prints what it promises."""

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "batch_ensemble_vit.py"
ROWS = ("single ViT", "BatchEnsemble full", "BatchEnsemble last 2")
NUMBER = r"(-?\d+\.\d+)"
COLUMNS = ("accuracy", "nll", "ece", "aurc", "auroc_near", "auroc_far")


def test_batch_ensemble_example(tmp_path):
    output = tmp_path / "be"
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "1", "--finetune-epochs", "0.5", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    out = result.stdout

    for name in ROWS:
        match = re.search(rf"^{re.escape(name)}\s+" + r"\s+".join([NUMBER] * 6) + r"\s*$", out, re.M)
        assert match, f"no metrics row {name!r} in:\n{out}"
        row = dict(zip(COLUMNS, map(float, match.groups()), strict=True))
        assert 0 <= row["accuracy"] <= 1 and row["nll"] > 0 and 0 <= row["ece"] <= 1, (name, row)
        assert 0 <= row["aurc"] <= 100 and 0 <= row["auroc_near"] <= 1 and 0 <= row["auroc_far"] <= 1, (name, row)

    costs = dict(re.findall(rf"^cost (.+?): parameters {NUMBER}x, FLOPs [\d.]+x$", out, re.M))
    assert set(costs) == set(ROWS), out
    assert float(costs["single ViT"]) == 1.0 and 1.0 < float(costs["BatchEnsemble full"]) < 1.5
    assert "reload check: OK" in out and "4 members" in out
    for name in ("config.json", "model.safetensors", "preprocessor_config.json", "modeling_batch_ensemble_vit.py"):
        assert (output / name).is_file(), sorted(p.name for p in output.iterdir())
