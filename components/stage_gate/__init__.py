"""Stage-gate component."""
