"""Benchmarks that print JSON: ``python -m dilaserve.bench SUBCOMMAND``."""
