"""What people read: the preflight table and JSON, the run report (markdown) and its plots."""
