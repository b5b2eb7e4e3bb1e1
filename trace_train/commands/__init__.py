"""One module per CLI command; each exposes a Hydra ``main``."""
