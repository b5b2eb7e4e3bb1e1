"""Register the SWE env ids (no swebench / datasets import here: both are loaded lazily)."""

from trace_envs.registry import register_env

SWEBENCH_ID = register_env("swebench", "trace_envs.swe.env:SWEBenchEnv")
CODE_LOCALIZATION_ID = register_env("code_localization", "trace_envs.swe.codeloc.env:CodeLocalizationEnv")
