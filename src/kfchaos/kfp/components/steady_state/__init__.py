"""Steady-state component."""
