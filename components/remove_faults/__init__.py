"""Remove-faults component."""
