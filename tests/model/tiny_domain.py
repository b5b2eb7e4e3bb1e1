"""A made-up retail-like domain for tests: atomic ids, tools, a tool episode, a corpus."""

from __future__ import annotations

import json

import numpy as np

from trace_train.model import render_chat

ORDER_IDS = [f"#W{n}" for n in (1234567, 2345678, 3456789, 9876543)]
ITEM_IDS = ["1002003004", "5006007008"]
USERS = ["anna_lee_1234", "sam_wu_5678"]
EMAILS = ["anna.lee1234@example.com", "sam.wu5678@example.com"]
ATOMIC = ORDER_IDS + ITEM_IDS + USERS + EMAILS + ["12345", "647 Maple Ave", "credit_card_1234567"]

TOOLS = [
    {"type": "function", "function": {"name": "get_order_details", "description": "Get an order.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "cancel_pending_order", "description": "Cancel a pending order.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
                    "required": ["order_id", "reason"]}}},
]
SYSTEM = "You are a retail agent. Check order status before acting."


def tool_call(name: str, **arguments):
    return {"id": "", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def episode(order_id: str = ORDER_IDS[0], email: str = EMAILS[0]) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Please cancel order {order_id}, my email is {email}."},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("get_order_details", order_id=order_id)]},
        {"role": "tool", "name": "get_order_details",
         "content": json.dumps({"order_id": order_id, "status": "pending"})},
        {"role": "assistant", "content": f"Order {order_id} is pending. Do you confirm the cancellation?"},
        {"role": "user", "content": "yes"},
        {"role": "assistant", "content": "Cancelling now.",
         "tool_calls": [tool_call("cancel_pending_order", order_id=order_id, reason="no longer needed")]},
        {"role": "tool", "name": "cancel_pending_order", "content": json.dumps({"status": "cancelled"})},
        {"role": "assistant", "content": "Done."},
    ]


def make_corpus(n: int = 60, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(n):
        ep = episode(str(rng.choice(ORDER_IDS)), str(rng.choice(EMAILS)))
        texts.append(render_chat(ep, TOOLS))
    return texts
