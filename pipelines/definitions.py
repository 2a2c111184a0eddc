"""Dagster definitions of the offline pipeline (assets are added by domain)."""
import dagster as dg

defs = dg.Definitions(assets=[])
