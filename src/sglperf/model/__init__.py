"""Plain data every other layer shares: deployments, verdicts, metrics, resolutions, result records.

Nothing here imports another sglperf package.
"""
