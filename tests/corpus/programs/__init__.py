"""The corpus's programs, one module each (see `../harness.py` for their interface)."""
