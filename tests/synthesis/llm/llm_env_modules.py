"""Canned LLM answers: one good env module for ``transfer_when_stuck`` and hostile variants of it."""

GOOD = '''"""transfer_when_stuck on retail-sim: requests no tool can serve; authenticate, then hand over."""

from trace_envs.synthesis.llm.authoring import CapabilityEnv, TaskSpec, call, say

REQUESTS = (
    ("change the email address on my account", "email change"),
    ("close my account for good", "account closure"),
    ("file a warranty claim for a broken item", "warranty claim"),
    ("update the phone number on my profile", "phone number update"),
    ("get a price match on an order", "price match"),
)


class Env(CapabilityEnv):
    capability = "transfer_when_stuck"

    def build_task(self, db, rng):
        users = sorted(db["users"])
        user_id = users[int(rng.integers(len(users)))]
        email = db["users"][user_id]["email"]
        ask, topic = REQUESTS[int(rng.integers(len(REQUESTS)))]
        opening = f"Hi, my email is {email}. I need to {ask}."
        return TaskSpec(opening=opening, facts={"user_id": user_id, "email": email, "topic": topic},
                        user_replies=["Yes, please help me with that."])

    def verify(self, task, outcome):
        authenticated = any(c.arguments.get("email") == task.facts["email"]
                            for c in outcome.called("find_user_id_by_email"))
        handed_over = any(task.facts["user_id"] in c.arguments.get("summary", "")
                          for c in outcome.called("transfer_to_human_agents"))
        wrote = outcome.db != outcome.initial_db
        return 1.0 if authenticated and handed_over and not wrote else 0.0

    def oracle(self, task):
        return [call("find_user_id_by_email", email=task.facts["email"]),
                call("transfer_to_human_agents",
                     summary=f"User {task.facts['user_id']} needs a {task.facts['topic']}; no tool can do it."),
                say("I have transferred you to a human agent.")]
'''

SYNTAX_ERROR = GOOD.replace("def verify(self, task, outcome):", "def verify(self, task, outcome)")

IMPORTS_SOCKET = "import socket\n" + GOOD

HIDDEN_IMPORT = GOOD.replace(
    "    def verify(self, task, outcome):\n",
    "    def verify(self, task, outcome):\n        __builtins__['__import__']('os').system('touch /tmp/pwned')\n")

LOOPS_IN_RESET = GOOD.replace(
    "        users = sorted(db[\"users\"])\n",
    "        while True:\n            pass\n        users = sorted(db[\"users\"])\n")

LOOPS_AT_IMPORT = GOOD.replace("\nclass Env(", "\nwhile True:\n    pass\n\n\nclass Env(", 1)

ALLOCATES_8GB = GOOD.replace(
    "        users = sorted(db[\"users\"])\n",
    "        hoard = bytearray(8 * 1024 ** 3)\n        users = sorted(db[\"users\"]) + [str(len(hoard))][:0]\n")

ORACLE_FAILS = GOOD.replace('call("find_user_id_by_email", email=task.facts["email"])',
                            'call("find_user_id_by_email", email="nobody@example.com")')

RENAMES_TOOL = GOOD.replace(
    "class Env(CapabilityEnv):\n    capability = \"transfer_when_stuck\"\n",
    "class Env(CapabilityEnv):\n    capability = \"transfer_when_stuck\"\n\n"
    "    def tools(self, db):\n"
    "        box = super().tools(db)\n"
    "        spec = box.tools.pop(\"find_user_id_by_email\")\n"
    "        box.tools[\"lookup_user\"] = ToolSpec(\"lookup_user\", spec.description, spec.parameters, spec.fn)\n"
    "        return box\n").replace(
    "from trace_envs.synthesis.llm.authoring import CapabilityEnv, TaskSpec, call, say",
    "from trace_envs.synthesis.llm.authoring import CapabilityEnv, TaskSpec, ToolSpec, call, say")

CONSTANT_REWARD = GOOD.replace("        return 1.0 if authenticated and handed_over and not wrote else 0.0",
                               "        return 1.0")


def answer(module: str, note: str = "Here is the module.") -> str:
    """A chat answer holding ``module`` in a python code block."""
    return f"{note}\n\n```python\n{module}```\n"
