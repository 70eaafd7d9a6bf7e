"""write_report on a synthetic results.json (docs/results_format.md) and synthetic seeded predictions."""

import base64
import copy
import io
import math
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image

from hf_uq.evaluation import Predictions, format_interval, score_pooled
from hf_uq.evaluation.plots import pareto_front
from hf_uq.evaluation.report import PLOT_FILES, write_report

SEEDS = [0, 1]
OODS = ["ood_near", "ood_far"]
SHIFTS = ["shift_noise_1", "shift_noise_2"]
C = 5
# name, family, role, quantization, signal strength, fidelity [test, shift, ood], relative costs
ROUTES = [
    ("deep ensemble", "teacher", "teacher", None, 3.0, [1.0, 1.0, 1.0], dict(flops=5.0, mem=4.6, lat=4.8)),
    ("single model", "single", "reference", None, 2.0, [0.8, 0.78, 0.75], dict(flops=1.0, mem=1.0, lat=1.0)),
    ("Asymmetric Duo (sidekick s)", "duo", None, None, 2.6, [0.9, 0.88, 0.85], dict(flops=1.2, mem=1.15, lat=1.3)),
    ("Asymmetric Duo (sidekick s) int8", "duo", None, {"backend": "quanto", "weights": "int8", "activations": None,
     "skipped": ["classifier"]}, 2.4, [0.5, 0.45, 0.4], dict(flops=1.2, mem=0.4, lat=1.6)),
]
QUANTIZED = "Asymmetric Duo (sidekick s) int8"


def _predictions(rng, labels, strength, shift=0.0):
    """Logits of one route on one split: noise, plus `strength - shift` on the label's logit (where labelled)."""
    n, labelled = len(labels), bool((labels >= 0).all())
    logits = rng.normal(0.0, 1.0 + shift, (n, C))
    if labelled:
        logits[np.arange(n), labels] += strength - shift
    logits = logits.astype(np.float32)
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return Predictions(logits=logits, probs=probs, labels=labels.astype(np.int64), uncertainty=1.0 - probs.max(axis=1))


def _interval(value):
    return [None if not math.isfinite(v) else float(v) for v in value]


def _synthetic(bootstrap=30):
    predictions, routes = {}, []
    for k, (name, family, role, quant, strength, fid, rel) in enumerate(ROUTES):
        seeds = []
        for seed in SEEDS:
            labels = np.random.default_rng([seed, 99]).integers(0, C, 320)  # every route predicts the same rows
            rng = np.random.default_rng([seed, k])
            split = {"test": _predictions(rng, labels[:160], strength)}
            split |= {o: _predictions(rng, np.full(80, -1), strength, shift=0.5 * j) for j, o in enumerate(OODS)}
            split |= {s: _predictions(rng, labels[160 + 80 * j:240 + 80 * j], strength, shift=0.4 * (j + 1))
                      for j, s in enumerate(SHIFTS)}
            seeds.append(split)
        predictions[name] = seeds
        pooled = score_pooled([s["test"] for s in seeds], ood={o: [s[o] for s in seeds] for o in OODS},
                              bootstrap=bootstrap)
        metrics = {"test": {m: _interval(v) for m, v in pooled.items()}}
        shift = score_pooled([Predictions.concatenate([s[x] for x in SHIFTS]) for s in seeds], bootstrap=bootstrap)
        metrics["shift"] = {m: _interval(v) for m, v in shift.items()}
        for x in SHIFTS:
            metrics[x] = {m: _interval(v) for m, v in score_pooled([s[x] for s in seeds], bootstrap=0).items()}
        budget = {"parameters": int(10_000 * rel["mem"]), "flops": 2.0e6 * rel["flops"],
                  "weight_bytes": int(40_000 * rel["mem"]), "peak_memory_bytes": int(3.0e6 * rel["mem"]),
                  "latency_ms": {"1": {"p50": 0.8 * rel["lat"], "p99": 1.1 * rel["lat"]},
                                 "32": {"p50": 3.0 * rel["lat"], "p99": 3.6 * rel["lat"]}}}
        relative = {"parameters": rel["mem"], "flops": rel["flops"], "weight_bytes": rel["mem"],
                    "peak_memory": rel["mem"], "latency_p50": {"1": rel["lat"], "32": rel["lat"]},
                    "latency_p99": {"1": rel["lat"], "32": rel["lat"]}, "latency": rel["lat"]}
        routes.append({
            "name": name, "family": family, "knob": {"name": "sidekick size", "value": "s"} if family == "duo" else None,
            "quantization": quant, "role": role, "models": {str(s): f"models/seed{s}/r{k}" for s in SEEDS},
            "extra": {}, "metrics": metrics,
            "fidelity": {"test": [fid[0], fid[0] - 0.05, min(fid[0] + 0.05, 1.0)],
                         "shift": [fid[1], None, None], "ood": [fid[2], fid[2] - 0.1, min(fid[2] + 0.1, 1.0)],
                         "below_threshold": fid[0] < 0.7},
            "budget": budget, "relative": relative,
            "fits_budget": rel["mem"] <= 1.2 and rel["lat"] <= 1.5,
        })
    results = {
        "schema": "hf_uq.results/1", "command": "hf-uq benchmark --quick", "created": "2026-11-29T21:30:00+00:00",
        "versions": {"python": "3.11.9", "hf_uq": "0.1.0", "torch": "2.6.0", "optimum-quanto": None},
        "seeds": SEEDS,
        "settings": {"bootstrap": bootstrap, "confidence": 0.95, "n_bins": 15, "sac_accuracy": 0.98,
                     "fidelity_threshold": 0.7, "budget": {"memory": 1.2, "latency": 1.5},
                     "latency_batch_sizes": [1, 32], "reference": "single model", "teacher": "deep ensemble",
                     "quick": True},
        "data": {"name": "synthetic", "id_split": "test", "calibration_split": "validation", "ood_splits": OODS,
                 "shift_splits": SHIFTS, "labels": [str(c) for c in range(C)],
                 "num_samples": {"test": 160, "ood_near": 80, "ood_far": 80, "shift_noise_1": 80, "shift_noise_2": 80}},
        "routes": routes,
        "predictions": "predictions",
    }
    return results, predictions


@pytest.fixture(scope="module")
def synthetic():
    return _synthetic()


@pytest.fixture(scope="module")
def full(synthetic, tmp_path_factory):
    results, predictions = synthetic
    folder = tmp_path_factory.mktemp("report")
    paths = write_report(results, str(folder), predictions, dpi=72)
    with open(paths["markdown"], encoding="utf-8") as md, open(paths["html"], encoding="utf-8") as page:
        return paths, md.read(), page.read()


class _TagBalance(HTMLParser):
    """Checks that every opened element is closed in order (void elements aside)."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.errors = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def _rows(markdown, section):
    """Rows of the first table after the heading `section`, as lists of cells (bold markers removed)."""
    body = markdown.split(f"## {section}", 1)[1]
    lines = [line for line in body.split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    return [[c.strip().replace("**", "") for c in line.strip("|").split(" | ")] for line in lines]


def test_files_and_images(full):
    paths, _, page = full
    assert set(paths["plots"]) == set(PLOT_FILES)
    for name, path in paths["plots"].items():
        assert path.endswith(PLOT_FILES[name])
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) > 200
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page)
    assert "http://" not in page and "https://" not in page
    parser = _TagBalance()
    parser.feed(page)
    assert parser.stack == [] and parser.errors == []
    images = re.findall(r'<img[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 4
    for data in images:
        raw = base64.b64decode(data)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(io.BytesIO(raw)) as image:
            assert image.format == "PNG" and min(image.size) > 200


def test_every_route_named(full):
    _, markdown, page = full
    for name, *_ in ROUTES:
        assert name in markdown
        assert name in page  # the names hold no HTML-special characters


def test_fidelity_flags(full):
    _, markdown, page = full
    rows = {row[0]: row for row in _rows(markdown, "Diversity fidelity")}
    assert "⚠ < 0.7" in rows[QUANTIZED][-1]
    assert "⚠" not in " ".join(rows["Asymmetric Duo (sidekick s)"])
    assert rows["Asymmetric Duo (sidekick s)"][1] == "0.90 [0.85, 0.95]"
    assert rows["deep ensemble (teacher)"][-1] == "teacher"
    assert page.count('<tr class="warn">') == 1


def test_headline_numbers_match_results(synthetic, full):
    results, _ = synthetic
    _, markdown, _ = full
    rows = _rows(markdown, "Headline")
    header = rows[0]
    spec = {"Accuracy ↑": ("accuracy", 1, 3), "NLL ↓": ("nll", 1, 3), "ECE ↓": ("ece", 1, 3),
            "AURC×100 ↓": ("aurc", 100, 2), "SAC@98 ↑": ("sac", 1, 3), "CP-AUROC ↑": ("cp_auroc", 1, 3)}
    spec |= {f"AUROC {o} ↑": (f"{o}/auroc", 1, 3) for o in OODS}
    assert header == ["Route", *spec]
    by_name = {row[0].split(" (teacher)")[0].split(" (reference)")[0]: row for row in rows[2:]}
    assert len(by_name) == len(ROUTES)
    for route in results["routes"]:
        row = by_name[route["name"]]
        for column, (metric, scale, digits) in spec.items():
            expected = format_interval(tuple(route["metrics"]["test"][metric]), scale=scale, digits=digits)
            assert row[header.index(column)] == expected, (route["name"], metric)
    # the best estimate of a column is bold
    accuracy = {name: results["routes"][k]["metrics"]["test"]["accuracy"][0] for k, (name, *_) in enumerate(ROUTES)}
    best = max(accuracy, key=accuracy.get)
    assert re.search(rf"\| {re.escape(best)}[^|]*\| \*\*", markdown)


def test_budget_and_shift_tables(full):
    _, markdown, _ = full
    rows = {row[0]: row for row in _rows(markdown, "Budget")}
    header = rows["Route"]
    assert header[1] == "Fits budget" and header[-1] == "P99 @ batch 32"
    assert rows["single model (reference)"][header.index("FLOPs/image")] == "2M (1.00×)"
    assert rows[QUANTIZED][1] == "✗ no (latency)"
    assert rows["deep ensemble (teacher)"][1] == "✗ no (memory, latency)"
    assert rows["Asymmetric Duo (sidekick s)"][1] == "✓ yes"
    assert rows[QUANTIZED][-1] == "5.76 ms (1.60×)"
    shift = {row[0] for row in _rows(markdown, "Covariate shift")}
    assert "Asymmetric Duo (sidekick s)" in shift


def test_without_predictions(synthetic, tmp_path):
    results = copy.deepcopy(synthetic[0])
    test = results["routes"][1]["metrics"]["test"]
    test["cp_auroc"] = [None, None, None]  # undefined (a seed without errors)
    test["accuracy"] = [test["accuracy"][0], None, None]  # bootstrap=0
    paths = write_report(results, str(tmp_path), dpi=60)
    assert set(paths["plots"]) == {"pareto"}
    assert (tmp_path / PLOT_FILES["pareto"]).is_file()
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert len(_rows(markdown, "Headline")) == len(ROUTES) + 2
    assert "⚠ < 0.7" in markdown and "Needs saved predictions" in markdown
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 1
    row = {r[0]: r for r in _rows(markdown, "Headline")}["single model (reference)"]
    assert row[1] == f"{test['accuracy'][0]:.3f}" and row[6] == "–"


def _stub_plots(monkeypatch):
    """Replace the drawing functions by recorders writing a tiny PNG: selection logic without rendering cost."""
    from hf_uq.evaluation import plots

    calls = {}

    def recorder(name):
        def draw(data, *args, **kwargs):
            calls[name] = data
            path = [a for a in args if isinstance(a, str)][0]
            Image.new("RGB", (4, 4)).save(path)
            return path
        return draw

    for name in ("plot_reliability", "plot_risk_coverage", "plot_ood_histograms", "plot_pareto"):
        monkeypatch.setattr(plots, name, recorder(name))
    return calls


def test_route_selection(synthetic, tmp_path, monkeypatch):
    results, predictions = synthetic
    calls = _stub_plots(monkeypatch)
    write_report(results, str(tmp_path), predictions)
    # default: teacher, reference, one route per other family (the unquantized duo), in report order
    assert list(calls["plot_reliability"]) == [name for name, *_ in ROUTES if name != QUANTIZED]
    assert list(calls["plot_ood_histograms"]) == list(calls["plot_reliability"])
    assert list(calls["plot_ood_histograms"]["single model"]) == OODS
    # risk-coverage: every route, on the id split and on the pooled shift splits
    assert list(calls["plot_risk_coverage"]) == ["test", "shift (pooled)"]
    assert list(calls["plot_risk_coverage"]["test"]) == [name for name, *_ in ROUTES]
    assert len(calls["plot_risk_coverage"]["shift (pooled)"]["single model"][0]) == 160
    assert [p["name"] for p in calls["plot_pareto"]] == [name for name, *_ in ROUTES]
    # a chosen subset, and routes without predictions left out of the prediction-based figures
    calls.clear()
    subset = {name: predictions[name] for name in ("deep ensemble", "single model")}
    paths = write_report(results, str(tmp_path), subset, plot_routes=["single model"])
    assert set(paths["plots"]) == set(PLOT_FILES)
    assert list(calls["plot_reliability"]) == ["single model"]
    assert list(calls["plot_risk_coverage"]["test"]) == ["deep ensemble", "single model"]
    with pytest.raises(ValueError, match="Asymmetric"):
        write_report(results, str(tmp_path), subset, plot_routes=["Asymmetric Duo (sidekick s)"])


def test_id_split_with_another_name(synthetic, tmp_path, monkeypatch):
    # build_results stores the id split's metrics under "test" whatever data.id_split is called
    results = copy.deepcopy(synthetic[0])
    results["data"]["id_split"] = "validation"
    predictions = {name: [{("validation" if k == "test" else k): v for k, v in seed.items()} for seed in seeds]
                   for name, seeds in synthetic[1].items()}
    calls = _stub_plots(monkeypatch)
    paths = write_report(results, str(tmp_path), predictions)
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Headline (validation split)" in markdown
    row = {r[0]: r for r in _rows(markdown, "Headline")}["single model (reference)"]
    assert row[1] == format_interval(tuple(results["routes"][1]["metrics"]["test"]["accuracy"]))
    assert set(paths["plots"]) == set(PLOT_FILES) and list(calls["plot_risk_coverage"]) == ["validation",
                                                                                             "shift (pooled)"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("routes"), "'routes'"),
        (lambda r: r.update(routes=[]), "non-empty"),
        (lambda r: r["routes"][2]["metrics"].pop("test"), r"'Asymmetric Duo \(sidekick s\)'.*'test'"),
        (lambda r: r["routes"][1].update(name="deep ensemble"), "twice"),
        (lambda r: r["routes"][1]["metrics"]["test"].update(ece=[0.1, 0.2]), r"'single model'.*test/ece"),
    ],
)
def test_bad_results(synthetic, tmp_path, mutate, message):
    results = copy.deepcopy(synthetic[0])
    mutate(results)
    with pytest.raises(ValueError, match=message):
        write_report(results, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "report.md").exists()


def test_bad_predictions(synthetic, tmp_path):
    results, predictions = synthetic
    with pytest.raises(ValueError, match="'nope'"):
        write_report(results, str(tmp_path), {"nope": predictions["single model"]})
    missing = [{k: v for k, v in seed.items() if k != "test"} for seed in predictions["single model"]]
    with pytest.raises(ValueError, match=r"'single model'.*'test'"):
        write_report(results, str(tmp_path), {"single model": missing})
    with pytest.raises(ValueError, match="not a results|dict"):
        write_report([], str(tmp_path))


def test_pareto_front_hand_example():
    # cost, value (lower is better)
    costs = [1.0, 2.0, 3.0, 2.0, 0.5, 4.0, np.nan, 3.0]
    values = [5.0, 3.0, 3.0, 4.0, 9.0, 1.0, 0.0, 3.0]
    front = pareto_front(costs, values)
    # 0 (cheap), 1 (beats 3 at equal cost, beats 2 and 7 at lower cost), 4 (cheapest), 5 (best value)
    assert front.tolist() == [True, True, False, False, True, True, False, False]
    # higher is better: flip the values
    front = pareto_front([1, 2, 3], [0.7, 0.9, 0.8], higher_is_better=True)
    assert front.tolist() == [True, True, False]
    # equal points are all kept
    assert pareto_front([1, 1], [2, 2]).tolist() == [True, True]
    with pytest.raises(ValueError, match="same length"):
        pareto_front([1, 2], [1])
