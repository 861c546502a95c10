"""Adapters from real engines to ``protocol.SpecPort`` (each imports its engine lazily)."""
