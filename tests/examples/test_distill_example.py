"""examples/distill_dirichlet.py runs end to end (two members, one epoch each) and prints what it promises."""

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "distill_dirichlet.py"
NUMBER = r"(-?\d+\.\d+)"


def test_distill_example(tmp_path):
    output = tmp_path / "student"
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--members", "2", "--epochs", "1", "--student-epochs", "1",
         "--output", str(output)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    out = result.stdout

    for name in ("teacher", "student"):
        match = re.search(rf"^{name}\s+" + r"\s+".join([NUMBER] * 5) + r"\s*$", out, re.M)
        assert match, f"no metrics row {name!r} in:\n{out}"
        acc, nll, ece, near, far = map(float, match.groups())
        assert 0 <= acc <= 1 and nll > 0 and 0 <= ece <= 1 and 0 <= near <= 1 and 0 <= far <= 1, (name, out)
    for what in ("epistemic vs teacher mutual information", "total vs teacher total uncertainty"):
        match = re.search(rf"fidelity, student {what}: {NUMBER}", out)
        assert match and -1 <= float(match.group(1)) <= 1, out
    assert "reload check: OK" in out
    decomposition = re.search(rf"total {NUMBER} = aleatoric {NUMBER} \+ epistemic {NUMBER} nats", out)
    total, aleatoric, epistemic = map(float, decomposition.groups())
    assert abs(total - aleatoric - epistemic) < 2e-4 and epistemic >= 0
    for name in ("config.json", "model.safetensors"):
        assert (output / name).is_file(), sorted(p.name for p in output.iterdir())
