"""Ports that live in the test suite: an independent second port and deliberately broken mutants."""
