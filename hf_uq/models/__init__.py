"""Model definitions; `tiny` holds small builders for tests and demos."""
