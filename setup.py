"""Package discovery only; everything else is in pyproject.toml.

`hf_uq.metrics` lives in the top-level `metrics/` folder and `hf_uq.model_cards` (the card template) in the
top-level `model_cards/` folder (see `[tool.setuptools.package-dir]`), which `[tool.setuptools.packages.find]`
cannot discover, so the list is built here.
"""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["hf_uq", "hf_uq.*"]), "hf_uq.metrics", "hf_uq.model_cards"])
