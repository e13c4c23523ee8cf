"""Readers, downloads and synthetic generators: one module per scenario."""
