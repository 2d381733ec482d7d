"""Running servers: launch and teardown, GPU inventory and allocation, introspection, provenance."""
