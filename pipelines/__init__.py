"""Dagster definitions of the offline pipeline (see README.md here)."""
