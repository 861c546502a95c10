"""Pure numpy reference math of the hybrid target (float32, one row at a time where order matters)."""
