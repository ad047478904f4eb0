"""Replay-stage component."""
