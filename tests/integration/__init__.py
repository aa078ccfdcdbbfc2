"""Tests of nodeagent against real parts that the tests start and stop (tests/conftest.py)."""
