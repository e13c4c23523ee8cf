"""Examples of varlen on your own data (importable as `examples.*` from the repository root)."""
