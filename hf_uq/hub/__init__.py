"""Sharing hf_uq models: self-contained remote code for `trust_remote_code=True` loading."""

from .remote_code import RemoteCodeBundle, RemoteCodeError, build_remote_code

__all__ = ["RemoteCodeBundle", "RemoteCodeError", "build_remote_code"]
