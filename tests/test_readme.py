"""The README's metric quickstarts run as written and mean what they say."""

import re
from pathlib import Path

import numpy as np

from hf_uq import functional as F

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_functional_quickstart(monkeypatch):
    namespace = {}
    exec(_python_blocks()[0], namespace)
    np.testing.assert_array_equal(namespace["correct"], [True, False, True, True])
    np.testing.assert_allclose(namespace["uncertainty"], [0.1, 0.4, 0.3, 0.2])


def test_evaluate_quickstart(monkeypatch):
    namespace = {}
    blocks = _python_blocks()
    exec(blocks[0], namespace)  # the evaluate block reuses `probs` and `labels`
    monkeypatch.chdir(README.parent)  # evaluate.load("metrics/ece") is relative to the root
    exec(blocks[1], namespace)
    result = namespace["ece"].compute(predictions=namespace["probs"], references=namespace["labels"])
    assert result["ece"] == F.ece(namespace["probs"], namespace["labels"])
