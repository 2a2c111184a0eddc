"""Assets of the offline pipeline, one module per domain."""
