"""The metric cards and module docstrings: their worked examples run and give the printed numbers.

Every ``>>>`` example of metrics/<name>/README.md and of the module's inputs description is run
as a doctest, so a card cannot go stale when hf_uq.functional changes.
"""

import doctest
from pathlib import Path

import evaluate.config
import pytest
import yaml
from evaluate.loading import get_imports

import hf_uq
from hf_uq import _metrics

ROOT = Path(__file__).resolve().parents[2]
METRICS = ["aurc", "ece", "ood_auroc", "sac_at_98"]
SECTIONS = [
    "## Metric Description",
    "## How to Use",
    "### Inputs",
    "### Output Values",
    "### Examples",
    "## Limitations and Bias",
    "## Citation",
]


@pytest.fixture
def in_checkout(monkeypatch, tmp_path):
    """Run examples from the repository root (``evaluate.load("metrics/<name>")``)."""
    monkeypatch.chdir(ROOT)
    # evaluate leaves an Arrow file behind when compute() raises (the error examples): keep
    # them out of ~/.cache
    monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", tmp_path)
    # until hf_uq/__init__.py exports it (test_metric_packaging checks the export)
    monkeypatch.setattr(hf_uq, "load_metric", _metrics.load_metric, raising=False)


def _run_doctest(text: str, name: str) -> None:
    test = doctest.DocTestParser().get_doctest(text, {}, name, name, 0)
    assert test.examples, f"{name} has no examples"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    failures = []
    runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)


def test_every_metric_has_a_card():
    assert _metrics.available_metrics() == METRICS
    for name in METRICS:
        for file in (f"{name}.py", "README.md", "requirements.txt"):
            assert (ROOT / "metrics" / name / file).is_file(), f"metrics/{name}/{file} is missing"


@pytest.mark.parametrize("name", METRICS)
def test_card_examples_give_the_numbers_in_the_card(in_checkout, name):
    _run_doctest((ROOT / "metrics" / name / "README.md").read_text(encoding="utf-8"), f"{name} card")


@pytest.mark.parametrize("name", METRICS)
def test_module_docstring_examples(in_checkout, name):
    module = _metrics.load_metric(name, keep_in_memory=True)
    _run_doctest(module.inputs_description, f"{name} inputs description")


@pytest.mark.parametrize("name", METRICS)
def test_card_layout(name):
    text = (ROOT / "metrics" / name / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    header = yaml.safe_load(text.split("---\n")[1])
    assert {"title", "tags", "description"} <= set(header)
    assert "evaluate" in header["tags"] and "metric" in header["tags"]
    positions = [text.find(section) for section in SECTIONS]
    assert -1 not in positions, f"missing sections: {[s for s, p in zip(SECTIONS, positions, strict=True) if p < 0]}"
    assert positions == sorted(positions), "sections out of order"
    # a card states the range and the better direction of every output
    assert "is better" in text.split("### Output Values")[1].split("### Examples")[0]


@pytest.mark.parametrize("name", METRICS)
def test_module_imports_pass_evaluates_dependency_check(name):
    # evaluate finds a module's dependencies with a regex over `import x` / `from x import y`
    # lines; everything must be an installed library, nothing a relative import to copy.
    imports = get_imports(str(ROOT / "metrics" / name / f"{name}.py"))
    assert {kind for kind, *_ in imports} == {"library"}
    assert {lib for _, lib, *_ in imports} == {"evaluate", "hf_uq"}
    requirements = (ROOT / "metrics" / name / "requirements.txt").read_text().split()
    assert {r.split(">")[0].split("=")[0] for r in requirements} >= {"evaluate", "hf_uq"}
