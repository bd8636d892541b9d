"""Batch files: reading, scoring in chunks, resumable jobs, outputs and checkpoints."""
