"""The engine's version (one place; the package and the provenance of every measured figure read it)."""
__version__ = "0.1.0"
