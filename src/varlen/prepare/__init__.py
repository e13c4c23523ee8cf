"""What every scenario does to its rows before batching: split them (`splits`), order and check their labels
(`labels`), find duplicates (`duplicates`), draw seeded per-epoch randomness (`draws`) and count what was
kept or skipped (`report`)."""
