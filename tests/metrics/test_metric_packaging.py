"""hf_uq.load_metric finds the metric modules in a checkout, an editable install and a wheel.

The install tests build a wheel / an editable install from a copy of the source tree and load
every module in a fresh interpreter, offline, with sockets disabled (about 10 s each; the
editable one is marked slow: the checkout fallback of metrics_dir() covers day-to-day use).
"""

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import hf_uq
from hf_uq import _metrics
from hf_uq import functional as F

ROOT = Path(__file__).resolve().parents[2]
METRICS = ["aurc", "ece", "ood_auroc", "sac_at_98"]

PROBS = [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.7, 0.2, 0.1],
         [0.2, 0.2, 0.6], [0.3, 0.6, 0.1], [0.5, 0.3, 0.2]]  # fmt: skip
LABELS = [0, 1, 1, 2, 1, 2]
SCORES, OOD = [0.1, 0.4, 0.35, 0.8, 0.7, 0.2], [0, 0, 1, 1, 1, 0]

# Run in a fresh interpreter: load and compute every module with the network unreachable.
LOAD_ALL = textwrap.dedent(
    """
    import importlib.util, json, socket, sys

    def _no_network(*args, **kwargs):
        raise OSError("network access attempted")

    socket.socket.connect = _no_network
    socket.create_connection = _no_network

    import hf_uq
    import hf_uq._metrics

    load_metric = getattr(hf_uq, "load_metric", hf_uq._metrics.load_metric)
    probs, labels, scores, ood = json.loads(sys.argv[1])
    out = {"hf_uq": hf_uq.__file__, "metrics_dir": str(hf_uq._metrics.metrics_dir())}
    out["as_package"] = importlib.util.find_spec("hf_uq.metrics") is not None
    out.update(load_metric("ece").compute(predictions=probs, references=labels, n_bins=5))
    out.update(load_metric("aurc").compute(predictions=probs, references=labels))
    out.update(load_metric("sac_at_98").compute(predictions=probs, references=labels))
    out.update(load_metric("ood_auroc").compute(predictions=scores, references=ood))
    print(json.dumps(out))
    """
)


def _expected() -> dict:
    import numpy as np

    probs, labels = np.array(PROBS), np.array(LABELS)
    u, correct = F.msp(probs), probs.argmax(1) == labels
    scores, ood = np.array(SCORES), np.array(OOD)
    return {
        "ece": F.ece(probs, labels, n_bins=5),
        "aurc": F.aurc(u, correct),
        "e_aurc": F.e_aurc(u, correct),
        "sac": F.sac(u, correct),
        **F.ood_metrics(scores[ood == 0], scores[ood == 1]),
    }


def _offline_env(tmp_path: Path, pythonpath: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHONPATH"))}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _load_all(python: str, tmp_path: Path, pythonpath: str | None = None) -> dict:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    args = json.dumps([PROBS, LABELS, SCORES, OOD])
    proc = subprocess.run(
        [python, "-c", LOAD_ALL, args], cwd=cwd, env=_offline_env(tmp_path, pythonpath),
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _copy_source(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("hf_uq", "metrics", "model_cards"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    return dest


def _subpackages(root: Path) -> set[str]:
    """Dotted names of the folders under root/hf_uq that hold Python files."""
    return {
        ".".join(d.relative_to(root).parts)
        for d in [root / "hf_uq", *(root / "hf_uq").rglob("*")]
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
    }


def _pip(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--quiet", "--no-deps"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


# ---------------------------------------------------------------- fast


def test_unknown_name_lists_the_available_metrics():
    with pytest.raises(ValueError, match=r"unknown hf_uq metric 'accuracy'; available metrics: aurc, ece, ood_auroc, sac_at_98"):
        _metrics.load_metric("accuracy")


def test_checkout_metrics_dir():
    if not Path(hf_uq.__file__).resolve().is_relative_to(ROOT):
        pytest.skip("hf_uq is not imported from this checkout")
    assert _metrics.metrics_dir().resolve() == (ROOT / "metrics").resolve()
    assert _metrics.available_metrics() == METRICS


def test_load_metric_forwards_evaluate_options(tmp_path):
    module = _metrics.load_metric("aurc", config_name="with_uncertainty", cache_dir=str(tmp_path))
    assert module.config_name == "with_uncertainty"
    assert Path(module.data_dir).is_relative_to(tmp_path)


def test_hf_uq_exports_load_metric():
    assert getattr(hf_uq, "load_metric", None) is _metrics.load_metric, (
        "hf_uq/__init__.py should export load_metric (from ._metrics import load_metric)"
    )


# ---------------------------------------------------------------- real installs


def test_wheel_ships_the_modules_and_loads_them_offline(tmp_path):
    src = _copy_source(tmp_path / "src")
    _pip("wheel", "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(src))
    (wheel,) = (tmp_path / "wheel").glob("hf_uq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "hf_uq/metrics/__init__.py" in names
    for name in METRICS:
        for file in (f"{name}.py", "README.md", "requirements.txt"):
            assert f"hf_uq/metrics/{name}/{file}" in names
    assert not any(n.startswith("metrics/") for n in names), "no top-level `metrics` package"
    shipped = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith(".py")}
    missing = sorted(_subpackages(src) - shipped)
    assert not missing, f"{missing} are missing from the wheel"

    target = tmp_path / "target"
    _pip("install", "--target", str(target), str(wheel))
    out = _load_all(sys.executable, tmp_path, pythonpath=str(target))
    assert Path(out.pop("hf_uq")).is_relative_to(target)
    assert Path(out.pop("metrics_dir")) == target / "hf_uq" / "metrics"
    assert out.pop("as_package")
    assert out == _expected()
    # evaluate's caches: a copy of each module and the Arrow data, both under HF_HOME
    cached = tmp_path / "hf_home" / "modules" / "evaluate_modules" / "metrics"
    assert sorted(p.name for p in cached.iterdir() if p.is_dir()) == METRICS
    assert (tmp_path / "hf_home" / "metrics" / "ece" / "default").is_dir()


@pytest.mark.slow
def test_editable_install_finds_the_checkout_modules(tmp_path):
    src = _copy_source(tmp_path / "src")
    build = subprocess.run(
        [sys.executable, "-c",
         f"from setuptools import build_meta; build_meta.build_editable({str(tmp_path / 'wheel')!r})"],
        cwd=src, capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("hf_uq-*.whl")

    # a fresh environment: the editable hf_uq, plus the current environment's libraries
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    _pip("install", "--target", purelib, str(wheel))
    Path(purelib, "zz_libraries.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    out = _load_all(python, tmp_path)
    assert Path(out.pop("hf_uq")).resolve() == (src / "hf_uq" / "__init__.py").resolve()
    assert Path(out.pop("metrics_dir")).resolve() == (src / "metrics").resolve()
    assert out.pop("as_package"), "found through the editable finder, not the checkout fallback"
    assert out == _expected()
