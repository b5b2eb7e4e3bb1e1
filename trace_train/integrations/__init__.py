"""Bridges to other training libraries (imported explicitly; nothing here imports them at import time)."""
