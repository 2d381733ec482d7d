"""Measuring a running server: prompt sets, the streaming meter and its per-chunk arithmetic."""
