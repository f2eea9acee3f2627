"""Lowerings of the Schedule IR to what runtimes and switches load (MSCCL XML, FRED tables)."""
