"""`python -m benchmarks`: see `benchmarks/run.py`."""

from benchmarks.run import main

__all__: list[str] = []

if __name__ == "__main__":
    main()
