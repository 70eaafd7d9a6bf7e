"""hf_uq: deep-ensemble-quality uncertainty for Hugging Face image classifiers at single-model cost.

Importing ``hf_uq`` registers every hf_uq model type with the transformers Auto classes.
"""

from . import functional

__version__ = "0.1.0"

__all__ = ["__version__", "functional"]
