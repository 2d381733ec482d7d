"""Judging: an intent's expectation against effective args (any tier), live evidence, and live-vs-preflight
divergence."""
