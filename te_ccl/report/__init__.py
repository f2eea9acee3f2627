"""Metrics of a schedule and its replay: bandwidths (nccl-tests' algbw/busbw) and buffers."""
