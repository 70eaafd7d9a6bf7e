"""hf_uq's `evaluate` metric modules, one folder per metric: <name>.py, its README.md card and
requirements.txt.

From a checkout: ``evaluate.load("metrics/<name>")``. Installed, this folder is the package
``hf_uq.metrics`` (see pyproject.toml) and ``hf_uq.load_metric("<name>")`` finds it.
"""
