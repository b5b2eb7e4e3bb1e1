"""The LLM env generator: prompts an OpenAI-compatible endpoint for capability env modules and keeps
what passes the sandboxed validator and the calibration gate (``trace_train.synthesis.generator``)."""
