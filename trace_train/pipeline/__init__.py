"""The end-to-end TRACE pipeline: stages with content-hash caching, resume, and one report per run."""
