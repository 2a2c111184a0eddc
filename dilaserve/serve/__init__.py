"""``python -m dilaserve.serve``: the OpenAI-compatible HTTP front end and its runtime."""
