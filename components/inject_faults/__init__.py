"""Inject-faults component."""
