"""Helpers shared by the three test folders (tests/unit, tests/integration, tests/sglang); no tests here."""
