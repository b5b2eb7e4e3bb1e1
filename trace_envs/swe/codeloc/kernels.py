"""Function templates ("kernels") of the code-localization generator, one per layer.

``utils`` kernels map an int to an int (branches, loops, arithmetic); ``core`` kernels map a list of
ints to an int through 1-2 utils functions; ``api`` kernels map a list to an int through 1-2 core
functions. Every loop is bounded, so mutants cannot hang. Placeholders: ``{name}``, callee names
``{u}``/``{w}`` (utils) or ``{c1}``/``{c2}`` (core), integer constants ``{a}``, ``{b}``, ``{c}``.
"""

from __future__ import annotations

UTILS = (
    "def {name}(x):\n    if x > {a}:\n        return x - {b}\n    return x + {c}\n",
    "def {name}(x):\n    y = x * {a}\n    return y // {b} + {c}\n",
    "def {name}(x):\n    total = 0\n    for i in range({a}):\n        if (x + i) % {b} == 0:\n"
    "            total += i\n    return total + x\n",
    "def {name}(x):\n    if x < {c}:\n        return {c}\n    if x > {a} + {b}:\n"
    "        return {a} + {b}\n    return x\n",
    "def {name}(x):\n    r = abs(x) % {a}\n    return r * {b} - x\n",
    "def {name}(x):\n    steps = 0\n    for _ in range({b}):\n        if x <= {a}:\n            break\n"
    "        x = x // 2\n        steps += 1\n    return x + steps\n",
)

CORE = (
    "def {name}(values):\n    return sum({u}(v) for v in values)\n",
    "def {name}(values):\n    best = -1000\n    for v in values:\n        w = {u}(v)\n        if w > best:\n"
    "            best = w\n    return best\n",
    "def {name}(values):\n    count = 0\n    for v in values:\n        if {u}(v) % {a} == {b}:\n"
    "            count += 1\n    return count + len(values)\n",
    "def {name}(values):\n    acc = 0\n    for i, v in enumerate(values):\n        acc += {u}(v) * (i + 1) - {w}(i)\n"
    "    return acc\n",
    "def {name}(values):\n    kept = [v for v in values if {u}(v) >= {a}]\n    return len(kept) * {b} + sum(kept)\n",
)

API = (
    "def {name}(values):\n    return {c1}(values) + {c2}(values[::-1])\n",
    "def {name}(values):\n    head = {c1}(values[: len(values) // 2 + 1])\n    return head * {a} - {c2}(values)\n",
    "def {name}(values):\n    return {c1}([v + {a} for v in values])\n",
    "def {name}(values):\n    if not values:\n        return 0\n    return {c1}(values) - {c2}(values[1:]) * {b}\n",
)

CALLEES = {"u": "utils", "w": "utils", "c1": "core", "c2": "core"}

DOMAINS = ("orders", "sensors", "tickets", "routes", "ledger", "shipments", "grades", "tariffs", "inventory",
           "readings", "batches", "quotas")
UTIL_VERBS = ("clamp", "scale", "bucket", "adjust", "weight", "offset", "fold", "shift", "trim", "pad", "damp",
              "round")
CORE_VERBS = ("aggregate", "summarize", "collect", "tally", "reduce", "rank", "measure", "score", "merge")
API_VERBS = ("compute", "report", "estimate", "evaluate", "quote", "forecast", "audit")
PACKAGES = ("ledgerkit", "tallyhub", "metricore", "routekit", "gradebook", "stockflow", "quotaflow", "sensorlib")
