"""Experiments on the simulator: ``python -m dilaserve.eval EXPERIMENT``."""
