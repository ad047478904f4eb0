"""Preflight component."""
