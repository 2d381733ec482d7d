"""Which deployment the examples run against: qwen36 on a GPU runner (or with --emulator), another
shipped deployment with SGLPERF_EXAMPLE_DEPLOYMENT (the self-tests use tiny-cpu for the CPU server)."""
