"""`python -m sglperf.testing.emulator <sglang argv>`: start the emulator like `python -m sglang.launch_server`."""

import os
import sys

from sglperf.testing.emulator.server import main

code = main()
sys.stdout.flush()
# Daemon stream threads may still be sleeping or writing; skip interpreter finalisation.
os._exit(code)
