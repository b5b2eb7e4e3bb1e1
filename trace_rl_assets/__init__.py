"""The project's non-Python assets as an installable package (found with ``importlib.resources``).

In a wheel this package holds ``conf/`` (Hydra configs), ``prompts/`` and ``checkpoints/`` (the shipped base),
mapped from the repository's top-level directories by ``setup.py``. In a source checkout it is empty and
``trace_train.paths`` finds those directories at the repository root. Use ``trace_train.paths``, not this package.
"""
