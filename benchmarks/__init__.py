"""kdist benchmarks (see benchmarks/README.md)."""
