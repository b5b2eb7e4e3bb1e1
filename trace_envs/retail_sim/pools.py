"""Fixed entity pools of retail-sim, designed for small models.

Measured (shared/reference/tiny-model-atomic-ids.md): tiny models trained for minutes do not learn to
copy multi-digit ids character by character, but do learn to copy an id that is ONE token. So every
entity id here is drawn from a fixed, finite pool generated once from ``POOL_SEED``; the domain
tokenizer adds each pool string as a single token (``atomic_vocabulary``). Worlds sample from the
pools; names, zips and street lines are pooled too so that every argument an agent must copy is one
token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

POOL_SEED = 20260401

FIRST_NAMES = (
    "anna", "ben", "carla", "dev", "emma", "felix", "grace", "hugo", "iris", "jon", "kara", "liam",
    "mia", "noah", "olga", "paul", "quinn", "rosa", "sam", "tara", "umar", "vera", "will", "yara",
)
LAST_NAMES = (
    "adams", "brown", "chen", "diaz", "evans", "fox", "garcia", "hall", "ito", "jones", "kim", "lopez",
    "moore", "nguyen", "ortiz", "patel", "reed", "smith", "tanaka", "wu",
)
STREETS = ("Maple Ave", "Oak St", "Pine Rd", "Cedar Ln", "Elm St", "Birch Way", "Lake Dr", "Hill Rd")
CITIES = (
    ("Austin", "TX"), ("Denver", "CO"), ("Seattle", "WA"), ("Boston", "MA"), ("Miami", "FL"),
    ("Phoenix", "AZ"), ("Chicago", "IL"), ("Portland", "OR"),
)
COUNTRY = "USA"

# Catalog: product name -> option dimension values. Every product has 3 colors x 2 sizes = 6 variants.
PRODUCTS = {
    "t-shirt": ("red", "blue", "black"),
    "lamp": ("white", "black", "green"),
    "backpack": ("gray", "navy", "olive"),
    "mug": ("white", "blue", "red"),
    "jacket": ("black", "brown", "green"),
    "sneakers": ("white", "gray", "blue"),
    "headphones": ("black", "silver", "red"),
    "water bottle": ("blue", "green", "pink"),
}
SIZES = ("small", "large")

N_USERS = 160
N_ORDERS = 400
N_PAYMENTS = 240


@dataclass(frozen=True)
class UserIdentity:
    user_id: str
    first_name: str
    last_name: str
    email: str
    zip: str


@dataclass(frozen=True)
class Variant:
    item_id: str
    product_id: str
    product: str
    color: str
    size: str


@dataclass(frozen=True)
class Pools:
    users: tuple[UserIdentity, ...]
    order_ids: tuple[str, ...]
    credit_cards: tuple[str, ...]
    gift_cards: tuple[str, ...]
    paypals: tuple[str, ...]
    product_ids: dict[str, str]
    variants: tuple[Variant, ...]
    zips: tuple[str, ...]
    address_lines: tuple[str, ...]
    suites: tuple[str, ...]


def _unique_numbers(rng: np.random.Generator, n: int, digits: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        value = str(int(rng.integers(10 ** (digits - 1), 10**digits)))
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out


@lru_cache(maxsize=1)
def pools() -> Pools:
    """The pools (deterministic; computed once per process)."""
    rng = np.random.default_rng(POOL_SEED)
    zips = tuple(_unique_numbers(rng, 40, 5))
    users = []
    for i, number in enumerate(_unique_numbers(rng, N_USERS, 4)):
        first = FIRST_NAMES[int(rng.integers(len(FIRST_NAMES)))]
        last = LAST_NAMES[int(rng.integers(len(LAST_NAMES)))]
        users.append(
            UserIdentity(
                user_id=f"{first}_{last}_{number}",
                first_name=first,
                last_name=last,
                email=f"{first}.{last}{number}@example.com",
                zip=zips[i % len(zips)],
            )
        )
    order_ids = tuple(f"#W{n}" for n in _unique_numbers(rng, N_ORDERS, 7))
    pay = _unique_numbers(rng, N_PAYMENTS, 7)
    third = N_PAYMENTS // 3
    product_numbers = _unique_numbers(rng, len(PRODUCTS), 10)
    item_numbers = iter(_unique_numbers(rng, len(PRODUCTS) * 3 * len(SIZES), 10))
    product_ids = dict(zip(PRODUCTS, product_numbers))
    variants = tuple(
        Variant(next(item_numbers), product_ids[name], name, color, size)
        for name, colors in PRODUCTS.items()
        for color in colors
        for size in SIZES
    )
    address_lines = tuple(f"{int(n) % 900 + 100} {STREETS[i % len(STREETS)]}"
                          for i, n in enumerate(_unique_numbers(rng, 48, 4)))
    suites = tuple(f"Suite {int(n) % 900 + 100}" for n in _unique_numbers(rng, 24, 4))
    return Pools(
        users=tuple(users),
        order_ids=order_ids,
        credit_cards=tuple(f"credit_card_{n}" for n in pay[:third]),
        gift_cards=tuple(f"gift_card_{n}" for n in pay[third: 2 * third]),
        paypals=tuple(f"paypal_{n}" for n in pay[2 * third:]),
        product_ids=product_ids,
        variants=variants,
        zips=zips,
        address_lines=address_lines,
        suites=suites,
    )


def entity_id_types() -> dict[str, str]:
    """Every pool entity id (the strings tool arguments name) mapped to its type.

    Types: ``user_id``, ``email``, ``order_id``, ``payment_method_id``, ``product_id``, ``item_id``,
    ``zip``. Names and address parts are atomic tokens too but are not ids.
    """
    p = pools()
    types: dict[str, str] = {}
    for user in p.users:
        types[user.user_id] = "user_id"
        types[user.email] = "email"
    types.update(dict.fromkeys(p.order_ids, "order_id"))
    types.update(dict.fromkeys(p.credit_cards + p.gift_cards + p.paypals, "payment_method_id"))
    types.update(dict.fromkeys(p.product_ids.values(), "product_id"))
    types.update(dict.fromkeys((v.item_id for v in p.variants), "item_id"))
    types.update(dict.fromkeys(p.zips, "zip"))
    return types


def atomic_vocabulary() -> list[str]:
    """Every pool string an agent may have to copy; the domain tokenizer makes each one token."""
    p = pools()
    # The order fixes the tokenizer's ids of these tokens: entity ids first, then address parts and names.
    words = [*entity_id_types(), *p.address_lines, *p.suites, *FIRST_NAMES, *LAST_NAMES]
    return list(dict.fromkeys(words))
