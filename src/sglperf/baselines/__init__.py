"""Baselines: the store, the noise-aware statistics, and one measurement against its baseline."""
