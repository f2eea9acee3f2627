"""Metrics, benchmark suite and report (tables, CSV, markdown, plots)."""
