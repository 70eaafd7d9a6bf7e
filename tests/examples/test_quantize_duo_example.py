"""examples/quantize_duo.py runs end to end (one training epoch per member) and prints what it promises."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_uq.quantization import is_backend_available

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "quantize_duo.py"
NUMBER = r"([-+]?\d+\.\d+)"


@pytest.mark.skipif(not is_backend_available("quanto"), reason="optimum-quanto is not installed")
def test_quantize_duo_example(tmp_path):
    output = tmp_path / "duo"
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "1", "--output", str(output)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    out = result.stdout

    assert re.search(r"T_large = \d+\.\d+, T_small = \d+\.\d+", out), out
    assert re.search(r"quanto w8a8: \d+ layers quantized, 0 kept in float", out), out
    for name in ("accuracy", "ece", "nll", "aurc", "ood_auroc/ood_near", "ood_auroc/ood_far"):
        row = re.search(rf"^{re.escape(name)}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s*$", out, re.M)
        assert row, f"no row {name!r} in:\n{out}"
        ref, quant, delta = map(float, row.groups())
        assert abs(quant - ref - delta) < 2e-4, (name, row.groups())
    summary = re.search(rf"delta ECE = {NUMBER} points, Spearman = {NUMBER}, top-1 agreement = {NUMBER}", out)
    assert summary and -1 <= float(summary.group(2)) <= 1, out
    ratio = re.search(rf"\(ratio {NUMBER}\)", out)
    assert ratio and 0.2 < float(ratio.group(1)) < 0.35, out  # int8 weights: about a quarter of float32
    assert re.search(rf"batch 1 = {NUMBER}, batch 32 = {NUMBER}", out), out
    assert "within the default bounds" in out
    assert "reload check: OK" in out and "load_quantized gives the same model: DuoForImageClassification" in out
    names = {p.name for p in output.iterdir()}
    assert {"config.json", "model.safetensors", "hf_uq_quantized.safetensors", "preprocessor_config.json"} <= names
