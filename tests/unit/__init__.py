"""Tests of nodeagent's code in this process: recordings, fakes, temporary trees."""
