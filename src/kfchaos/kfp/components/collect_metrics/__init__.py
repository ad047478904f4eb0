"""Collect-metrics component."""
