"""Test doubles for sglperf's own tests and for users' fast tests. Production code never imports this."""
