"""retail-sim tools: τ²-Bench retail tool names, argument schemas and semantics over a small DB.

The DB is a plain dict ``{"users": {...}, "orders": {...}, "products": {...}}`` mutated in place.
Policy rules that τ² leaves to the agent (ownership of an order, confirmation) are *not* enforced
here, exactly as in τ²; status rules that τ²'s tools enforce are enforced.
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
import re
from collections.abc import Iterable
from typing import Any

from trace_envs.core.tools import STR, STR_LIST, ToolBox, ToolError, ToolSpec, params
from trace_envs.core.tree_copy import copy_tree

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
# The writes that settle a price difference with one of the user's payment methods (an exchange, an item change).
SETTLEMENT_TOOLS = frozenset({"exchange_delivered_order_items", "modify_pending_order_items"})
_PAYMENT_WORDS = re.compile(r"gift[ _]?card|credit[ _]?card|debit[ _]?card|paypal|payment method|"
                            r"\bpa(?:y|ying|id) (?:\w+ ){0,3}?with\b|\bcharged?\b", re.IGNORECASE)
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def db_hash(db: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the DB (the τ²-style end-state fingerprint)."""
    return hashlib.sha256(json.dumps(db, sort_keys=True, default=str).encode()).hexdigest()


def _eval_arith(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval_arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval_arith(node.left), _eval_arith(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_arith(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ToolError("invalid expression")


def calculate(expression: str) -> str:
    """τ² semantics: only digits, + - * / ( ) . and spaces; result rounded to 2 decimals, as a string."""
    if not expression.strip() or any(ch not in "0123456789+-*/(). " for ch in expression):
        raise ToolError("invalid characters in expression")
    if len(expression) > 200:
        raise ToolError("expression too long")
    try:
        value = _eval_arith(ast.parse(expression, mode="eval"))
    except (SyntaxError, ZeroDivisionError, RecursionError, ValueError) as exc:
        raise ToolError(f"invalid expression ({type(exc).__name__})") from exc
    return str(round(value, 2))


class RetailTools:
    """The tool implementations bound to one episode's DB."""

    def __init__(self, db: dict[str, Any]):
        self.db = db

    # -- reads ----------------------------------------------------------------------------------
    def find_user_id_by_email(self, email: str) -> str:
        for user in self.db["users"].values():
            if user["email"].lower() == email.lower():
                return user["user_id"]
        raise ToolError("User not found")

    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        for user in self.db["users"].values():
            name = user["name"]
            if (name["first_name"].lower(), name["last_name"].lower(), user["address"]["zip"]) == (
                first_name.lower(), last_name.lower(), zip
            ):
                return user["user_id"]
        raise ToolError("User not found")

    def get_user_details(self, user_id: str) -> dict[str, Any]:
        return self._user(user_id)

    def get_order_details(self, order_id: str) -> dict[str, Any]:
        return self._order(order_id)

    def get_product_details(self, product_id: str) -> dict[str, Any]:
        product = self.db["products"].get(product_id)
        if product is None:
            raise ToolError("Product not found")
        return product

    def get_item_details(self, item_id: str) -> dict[str, Any]:
        for product in self.db["products"].values():
            if item_id in product["variants"]:
                return {"item_id": item_id, "product_id": product["product_id"], **product["variants"][item_id]}
        raise ToolError("Item not found")

    def list_all_product_types(self) -> str:
        names = {p["name"]: p["product_id"] for p in self.db["products"].values()}
        return json.dumps(dict(sorted(names.items())), separators=(",", ":"))

    def transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"

    # -- writes ---------------------------------------------------------------------------------
    def cancel_pending_order(self, order_id: str, reason: str) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be cancelled")
        if reason not in CANCEL_REASONS:
            raise ToolError("Invalid reason")
        user = self._user(order["user_id"])
        for payment in list(order["payment_history"]):
            order["payment_history"].append(
                {"transaction_type": "refund", "amount": payment["amount"],
                 "payment_method_id": payment["payment_method_id"]}
            )
            method = user["payment_methods"].get(payment["payment_method_id"])
            if method and method["source"] == "gift_card":
                method["balance"] = round(method["balance"] + payment["amount"], 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        return order

    def modify_pending_order_address(
        self, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> dict[str, Any]:
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        order["address"] = {"address1": address1, "address2": address2, "city": city, "state": state,
                            "country": country, "zip": zip}
        return order

    def modify_user_address(
        self, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> dict[str, Any]:
        user = self._user(user_id)
        user["address"] = {"address1": address1, "address2": address2, "city": city, "state": state,
                           "country": country, "zip": zip}
        return user

    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> dict[str, Any]:
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        user = self._user(order["user_id"])
        method = user["payment_methods"].get(payment_method_id)
        if method is None:
            raise ToolError("Payment method not found")
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ToolError("There should be exactly one payment for a pending order")
        old = history[0]
        if old["payment_method_id"] == payment_method_id:
            raise ToolError("The new payment method should be different from the current one")
        amount = old["amount"]
        if method["source"] == "gift_card" and method["balance"] < amount:
            raise ToolError("Insufficient gift card balance to pay for the order")
        history += [
            {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
            {"transaction_type": "refund", "amount": amount, "payment_method_id": old["payment_method_id"]},
        ]
        if method["source"] == "gift_card":
            method["balance"] = round(method["balance"] - amount, 2)
        old_method = user["payment_methods"].get(old["payment_method_id"])
        if old_method and old_method["source"] == "gift_card":
            old_method["balance"] = round(old_method["balance"] + amount, 2)
        return order

    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be modified")
        diff, new_variants = self._swap_check(order, item_ids, new_item_ids, allow_same=False)
        user = self._user(order["user_id"])
        method = user["payment_methods"].get(payment_method_id)
        if method is None:
            raise ToolError("Payment method not found")
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the new item")
        order["payment_history"].append(
            {"transaction_type": "payment" if diff > 0 else "refund", "amount": abs(diff),
             "payment_method_id": payment_method_id}
        )
        if method["source"] == "gift_card":
            method["balance"] = round(method["balance"] - diff, 2)
        for item_id, new_id in zip(item_ids, new_item_ids):
            for item in order["items"]:
                if item["item_id"] == item_id:
                    variant = new_variants[new_id]
                    item.update(item_id=new_id, price=variant["price"], options=dict(variant["options"]))
                    break
        order["status"] = "pending (item modified)"
        return order

    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be exchanged")
        diff, _ = self._swap_check(order, item_ids, new_item_ids, allow_same=True)
        user = self._user(order["user_id"])
        method = user["payment_methods"].get(payment_method_id)
        if method is None:
            raise ToolError("Payment method not found")
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the price difference")
        order.update(
            status="exchange requested", exchange_items=sorted(item_ids), exchange_new_items=sorted(new_item_ids),
            exchange_payment_method_id=payment_method_id, exchange_price_difference=round(diff, 2),
        )
        return order

    def return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be returned")
        user = self._user(order["user_id"])
        method = user["payment_methods"].get(payment_method_id)
        if method is None:
            raise ToolError("Payment method not found")
        if method["source"] != "gift_card" and payment_method_id != order["payment_history"][0]["payment_method_id"]:
            raise ToolError("Payment method should be either the original payment method or a gift card")
        self._check_items_present(order, item_ids)
        order.update(status="return requested", return_items=sorted(item_ids),
                     return_payment_method_id=payment_method_id)
        return order

    # -- helpers --------------------------------------------------------------------------------
    def _user(self, user_id: str) -> dict[str, Any]:
        user = self.db["users"].get(user_id)
        if user is None:
            raise ToolError("User not found")
        return user

    def _order(self, order_id: str) -> dict[str, Any]:
        order = self.db["orders"].get(order_id)
        if order is None:
            raise ToolError("Order not found")
        return order

    def _check_items_present(self, order: dict[str, Any], item_ids: list[str]) -> None:
        available = [item["item_id"] for item in order["items"]]
        for item_id in item_ids:
            if item_id not in available:
                raise ToolError(f"{item_id} not found")
            available.remove(item_id)

    def _swap_check(
        self, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str], allow_same: bool
    ) -> tuple[float, dict[str, dict[str, Any]]]:
        self._check_items_present(order, item_ids)
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match")
        diff = 0.0
        chosen: dict[str, dict[str, Any]] = {}
        for item_id, new_id in zip(item_ids, new_item_ids):
            item = next(i for i in order["items"] if i["item_id"] == item_id)
            product = self.db["products"][item["product_id"]]
            variant = product["variants"].get(new_id)
            if variant is None:
                raise ToolError(f"New item {new_id} not found or is not a variant of the same product")
            if not allow_same and new_id == item_id:
                raise ToolError("The new item id should be different from the old item id")
            if not variant["available"]:
                raise ToolError(f"New item {new_id} not available")
            diff += variant["price"] - item["price"]
            chosen[new_id] = variant
        return diff, chosen


_ADDRESS_PARAMS = {name: STR for name in ADDRESS_FIELDS}

TOOL_DECLARATIONS: list[tuple[str, str, dict[str, Any], bool]] = [
    ("find_user_id_by_email", "Find a user id by email.", params({"email": STR}), False),
    ("find_user_id_by_name_zip", "Find a user id by first name, last name and zip code.",
     params({"first_name": STR, "last_name": STR, "zip": STR}), False),
    ("get_user_details", "Get a user's details, payment methods and orders.", params({"user_id": STR}), False),
    ("get_order_details", "Get the status and details of an order.", params({"order_id": STR}), False),
    ("get_product_details", "Get a product and its variants.", params({"product_id": STR}), False),
    ("get_item_details", "Get one variant by item id.", params({"item_id": STR}), False),
    ("list_all_product_types", "List product names and ids.", params({}), False),
    ("calculate", "Evaluate an arithmetic expression.", params({"expression": STR}), False),
    ("transfer_to_human_agents", "Transfer the user to a human agent.", params({"summary": STR}), False),
    ("cancel_pending_order", "Cancel a pending order. Reason: 'no longer needed' or 'ordered by mistake'.",
     params({"order_id": STR, "reason": STR}), True),
    ("modify_pending_order_address", "Change the shipping address of a pending order.",
     params({"order_id": STR, **_ADDRESS_PARAMS}), True),
    ("modify_user_address", "Change a user's default address.", params({"user_id": STR, **_ADDRESS_PARAMS}), True),
    ("modify_pending_order_payment", "Change the payment method of a pending order.",
     params({"order_id": STR, "payment_method_id": STR}), True),
    ("modify_pending_order_items", "Swap items of a pending order for other variants of the same product.",
     params({"order_id": STR, "item_ids": STR_LIST, "new_item_ids": STR_LIST, "payment_method_id": STR}), True),
    ("exchange_delivered_order_items", "Exchange items of a delivered order for other variants.",
     params({"order_id": STR, "item_ids": STR_LIST, "new_item_ids": STR_LIST, "payment_method_id": STR}), True),
    ("return_delivered_order_items", "Return items of a delivered order.",
     params({"order_id": STR, "item_ids": STR_LIST, "payment_method_id": STR}), True),
]

WRITE_TOOLS = frozenset(name for name, _, _, mutates in TOOL_DECLARATIONS if mutates)


def build_toolbox(db: dict[str, Any]) -> ToolBox:
    impl = RetailTools(db)
    specs = []
    for name, description, schema, mutates in TOOL_DECLARATIONS:
        fn = calculate if name == "calculate" else getattr(impl, name)
        specs.append(ToolSpec(name, description, schema, fn, mutates))
    return ToolBox.of(specs)


def replay(db: dict[str, Any], actions: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Apply gold actions to a copy of ``db`` (errors ignored, as τ² does) and return the copy."""
    db = copy_tree(db)
    box = build_toolbox(db)
    for name, args in actions:
        box.call(name, args)
    return db


def payment_left_open(request_text: str) -> bool:
    """Whether a request leaves its payment method open: its words (what the user said about it) name none -- no
    card, PayPal, "payment method", "pay with" or "charge". Where a user does name one (a return "with the refund
    on my gift card", an airline change "paid with credit_card_..."), only that method is right."""
    return not _PAYMENT_WORDS.search(request_text)


def settle_as_chosen(gold: list[tuple[str, dict[str, Any]]], writes: list[dict[str, Any]],
                     open_orders: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """``gold`` with the payment method of each exchange / item change (``SETTLEMENT_TOOLS``) on an order of
    ``open_orders`` (requests that leave the method open, :func:`payment_left_open`) taken from the agent's first
    write of that tool on that order the tools accepted (``writes``: ``{"name", "arguments", "error"}``, in order):
    the tools accept only a method of the order's owner that covers the difference (a gift card's balance), so any
    such method the user would accept passes, and the rest of the end state must still equal the gold's. An action
    the agent never wrote successfully keeps the gold's method."""
    open_orders = set(open_orders)
    out: list[tuple[str, dict[str, Any]]] = []
    for name, args in gold:
        if name in SETTLEMENT_TOOLS and args.get("order_id") in open_orders:
            chosen = next((w["arguments"].get("payment_method_id") for w in writes
                           if w["name"] == name and not w["error"] and isinstance(w["arguments"], dict)
                           and w["arguments"].get("order_id") == args["order_id"]), None)
            if isinstance(chosen, str) and chosen != args.get("payment_method_id"):
                args = {**args, "payment_method_id": chosen}
        out.append((name, args))
    return out


def tool_vocabulary() -> list[str]:
    """Tool names, argument names and enumerated values: a domain tokenizer makes each one token."""
    words: list[str] = []
    for name, _, schema, _ in TOOL_DECLARATIONS:
        words.append(name)
        words.extend(schema["properties"])
    words.extend(CANCEL_REASONS)
    return list(dict.fromkeys(words))
