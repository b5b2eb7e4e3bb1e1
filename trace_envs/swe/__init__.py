"""SWE-bench-style envs: task sources, local/docker backends, grading, the code-localization env.

Importing this package is cheap; ``swebench``/``datasets``/``docker`` are imported only when the
docker backend or a hub dataset is used.
"""
