"""Helpers shared by test packages (each package's own builders sit beside its tests)."""
