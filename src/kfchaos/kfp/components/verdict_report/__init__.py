"""Verdict-and-report component."""
