"""Baseline component."""
