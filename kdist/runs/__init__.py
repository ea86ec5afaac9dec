"""A run folder: its layout and file names, its lock, the resume check, file I/O, sweeps, plots."""
