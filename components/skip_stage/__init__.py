"""Skip-stage component."""
