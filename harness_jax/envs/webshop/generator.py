"""The generated catalog and WebShop's synthetic-goal recipe.

A ``GeneratedCatalog(n_products, seed)`` holds no products: product ``i`` is rebuilt on demand
from its own random stream (``seed``, ``i``), so a million-product catalog costs no memory
beyond its search index, and every process rebuilds the same products. Each product is a dict
with the keys WebShop's ``load_products`` produces (``asin``, ``category``, ``query``,
``product_category``, ``name``/``Title``, ``Description``, ``BulletPoints``, ``Attributes``,
``options``, ``pricing``, ``Price``, ``Rating``, ``Reviews``, ...), plus ``name_nouns`` (the
title's nouns, recorded while the title is written, so the type reward needs no tagger) and
``instruction_text``/``instruction_attributes`` (the per-product instruction of
``items_ins_v2``).

Goals follow WebShop's synthetic recipe (``get_synthetic_goals``): the product's instruction,
then `` with <option>: <value>, and ...`` for one combination of its options (names sorted),
then ``, and price lower than X.00 dollars`` with X the larger of two draws from the four
``PRICE_RANGE`` steps above the product's price. A goal is kept only if its own product, bought
with the goal's options, earns reward 1.0 under the published reward (option values that
WebShop's colour normalisation would garble are thereby never asked for).

ASINs are ``"B"`` + 9 base-36 digits, a seeded bijection of the product index (so the catalog
maps ASIN -> index without a table).
"""
from __future__ import annotations

import hashlib
import itertools
import random
from typing import Iterator, Optional, Sequence

from harness_jax.envs.webshop import reward as rw
from harness_jax.envs.webshop import vocab

_M = 36 ** 9
_A = 62_767_505_111_981             # ~0.618 M, coprime with 36: index -> ASIN is a bijection
_A_INV = pow(_A, -1, _M)
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX_PRODUCTS = 10 ** 9


def _mix(*parts) -> int:
    h = hashlib.blake2b("|".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big")


_MASK = (1 << 64) - 1


class _Rng:
    """splitmix64: a small, fast, portable stream (one per product; seeding Python's Mersenne
    Twister costs more than generating a whole product)."""

    __slots__ = ("s",)

    def __init__(self, seed: int):
        self.s = seed & _MASK

    def next(self) -> int:
        self.s = z = (self.s + 0x9E3779B97F4A7C15) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def random(self) -> float:
        return (self.next() >> 11) * (1.0 / 9007199254740992.0)

    def choice(self, seq):
        return seq[self.next() % len(seq)]

    def randint(self, a: int, b: int) -> int:
        return a + self.next() % (b - a + 1)

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.random()

    def sample(self, seq, k: int) -> list:
        pool = list(seq)
        n = len(pool)
        for j in range(k):
            r = j + self.next() % (n - j)
            pool[j], pool[r] = pool[r], pool[j]
        return pool[:k]


def _base36(x: int) -> str:
    out = []
    for _ in range(9):
        x, r = divmod(x, 36)
        out.append(_DIGITS[r])
    return "".join(reversed(out))


def _join_attrs(attrs: Sequence[str]) -> str:
    if len(attrs) == 1:
        return attrs[0]
    return ", ".join(attrs[:-1]) + " and " + attrs[-1]


_INSTRUCTIONS = ("i need {a} {t}", "i am looking for {a} {t}", "i want to buy {a} {t}",
                 "find me {a} {t}", "i would like {a} {t}", "get me {a} {t}",
                 "i'm looking for {t} that {be} {a}", "show me {t} that {be} {a}")
_BULLET_TAILS = ("designed for {uses}", "a favorite of our customers", "made to last",
                 "tested for quality and comfort", "easy to use every day",
                 "great value for the price")


class GeneratedCatalog:
    """``n_products`` generated products of stream ``seed`` (see module docstring)."""

    kind = "generated"

    def __init__(self, n_products: int, seed: int = 0):
        if not isinstance(n_products, int) or not 1 <= n_products <= MAX_PRODUCTS:
            raise ValueError(f"n_products={n_products!r}: expected an int in [1, {MAX_PRODUCTS}]")
        self.n = n_products
        self.seed = int(seed)
        self._offset = _mix("webshop-asin", self.seed) % _M
        self._base = _mix("webshop-product", self.seed)

    def __len__(self) -> int:
        return self.n

    @property
    def spec(self) -> dict:
        return {"kind": self.kind, "n_products": self.n, "seed": self.seed}

    # -- identity -------------------------------------------------------------------------
    def asin(self, i: int) -> str:
        return "B" + _base36((_A * i + self._offset) % _M)

    def index_of(self, asin: str) -> Optional[int]:
        a = str(asin).upper()
        if len(a) != 10 or a[0] != "B" or any(c not in _DIGITS for c in a[1:]):
            return None
        x = int(a[1:], 36)
        i = ((x - self._offset) * _A_INV) % _M
        return i if i < self.n else None

    # -- products -------------------------------------------------------------------------
    def _rng(self, i: int, stream: int = 0) -> _Rng:
        return _Rng(self._base ^ ((i * 0xD1B54A32D192ED03 + stream) & _MASK))

    def product_type(self, i: int) -> vocab.ProductType:
        return vocab.TYPES[self._rng(i).next() % len(vocab.TYPES)]

    def product(self, i: int) -> dict:
        """Product ``i`` as WebShop's loader would hold it (a fresh dict on every call)."""
        if not 0 <= i < self.n:
            raise IndexError(f"product index {i} out of range [0, {self.n})")
        rng = self._rng(i)
        t = vocab.TYPES[rng.next() % len(vocab.TYPES)]
        title, nouns, parts = _title(rng, t)
        options: dict = {}
        for name, values, (lo, hi) in t.options:
            k = rng.randint(lo, min(hi, len(values)))
            if k > 0:
                chosen = set(rng.sample(values, k))
                options[name] = [v for v in values if v in chosen]
        pricing, price_tag = _pricing(rng, t)
        desc, bullets = _texts(rng, t, parts)
        ins_attrs, instruction = _instruction(rng, parts)
        return {
            "asin": self.asin(i), "category": t.category, "query": t.query,
            "product_category": t.path, "name": title, "Title": title,
            "full_description": desc, "Description": desc,
            "small_description": bullets, "BulletPoints": bullets,
            "pricing": pricing, "Price": price_tag, "options": options, "option_to_image": {},
            "Attributes": parts["attributes"], "Reviews": [], "Rating": "N.A.",
            "MainImage": None, "instruction_text": instruction,
            "instruction_attributes": ins_attrs, "name_nouns": nouns,
        }

    def price(self, i: int) -> float:
        """The price the reward uses (WebShop's ``product_prices``): a range is drawn from,
        here from the product's own stream, so it is the same in every process."""
        pricing = self.product(i)["pricing"]
        if len(pricing) == 1:
            return float(pricing[0])
        return self._rng(i, stream=1).uniform(*pricing[:2])

    def document(self, i: int) -> str:
        return search_document(self.product(i))

    def documents(self) -> Iterator[str]:
        for i in range(self.n):
            yield self.document(i)


# -- the parts of one product (draw order matters: it defines the catalog) -----------------------
def _title(rng: "_Rng", t: vocab.ProductType) -> tuple:
    """``(title, its nouns, parts)``: brand, [audience], [adjective], [material], head,
    [model code], [extra], [", " first attribute]; ``parts`` holds what later texts reuse."""
    brand = "".join(rng.choice(vocab.SYLLABLES) for _ in range(rng.choice((2, 2, 3))))
    brand = brand.capitalize()
    words: list = [brand]
    nouns: list = [brand.lower()]
    audience = None
    if t.audience and rng.random() < 0.8:
        audience = rng.choice(t.audience)
        words.append(audience[0])
        nouns += audience[1]
    if rng.random() < 0.6:
        words.append(rng.choice(vocab.ADJECTIVES[t.category]))
    material = rng.choice(t.materials)
    if rng.random() < 0.6:
        words.append(material[0])
        nouns += material[1]
    head = rng.choice(t.heads)
    words.append(head[0])
    nouns += head[1]
    if t.model_codes and rng.random() < 0.7:
        code = rng.choice("ABCDEFGHKMPRSTVXZ") + rng.choice("ABCDEFGHKMPRSTVXZ") + str(
            rng.randint(100, 9999))
        words.append(code)
        nouns.append(code.lower())
    if t.extras and rng.random() < 0.3:
        extra = rng.choice(t.extras)
        words.append(extra[0])
        nouns += extra[1]
    attributes = rng.sample(t.attributes, rng.randint(4, min(6, len(t.attributes))))
    title = " ".join(words)
    if rng.random() < 0.5:
        title += ", " + attributes[0].title()
    parts = {"brand": brand, "audience": audience, "material": material[0].lower(),
             "head": head[0].lower(), "attributes": attributes, "uses": t.uses}
    return title, nouns, parts


def _pricing(rng: "_Rng", t: vocab.ProductType) -> tuple:
    """``(pricing, price tag)``: one price, or (15%) a range, formatted as WebShop does."""
    lo, hi = t.price
    p = round(rng.uniform(lo, hi), 2)
    if rng.random() < 0.15:
        pricing = [p, round(p * rng.uniform(1.1, 1.6), 2)]
        return pricing, f"${pricing[0]} to ${pricing[1]}"
    return [p], f"${p}"


def _texts(rng: "_Rng", t: vocab.ProductType, parts: dict) -> tuple:
    """``(description, bullet points)``, mentioning some of the product's attributes."""
    brand, head, attrs = parts["brand"], parts["head"], parts["attributes"]
    desc = [f"The {brand} {head} ({parts['material']}) is built for {t.uses}.",
            f"It features {attrs[1]} and {attrs[2]}."]
    desc += [s.format(brand=brand, head=head, uses=t.uses)
             for s in rng.sample(vocab.DESCRIPTION_SENTENCES, rng.randint(1, 3))]
    bullets = [f"{a.upper()}: {rng.choice(_BULLET_TAILS).format(uses=t.uses)}"
               for a in attrs[:rng.randint(2, 4)]]
    bullets.append(f"MATERIAL: {parts['material']}")
    return " ".join(desc), bullets


def _instruction(rng: "_Rng", parts: dict) -> tuple:
    """``(instruction attributes, instruction)``: items_ins_v2's per-product instruction."""
    attrs = parts["attributes"]
    ins_attrs = rng.sample(attrs, min(rng.choice((1, 2, 2, 3, 3)), len(attrs)))
    audience = parts["audience"]
    target = (audience[2] + " " if audience and audience[2] else "") + parts["head"]
    template = rng.choice(_INSTRUCTIONS)
    plural = parts["head"].endswith("s") and not parts["head"].endswith("ss")
    return ins_attrs, template.format(a=_join_attrs(ins_attrs), t=target,
                                      be="are" if plural else "is")


def search_document(product: dict) -> str:
    """The text WebShop indexes for a product: title, description, first bullet point and the
    option text (``name: v1, v2, and name: ...``), lower-cased."""
    option_texts = [f"{name}: {', '.join(values)}"
                    for name, values in (product.get("options") or {}).items()]
    bullets = product.get("BulletPoints") or [""]
    return " ".join([product.get("Title") or "", product.get("Description") or "",
                     bullets[0] if bullets else "", ", and ".join(option_texts)]).lower()


# --------------------------------------------------------------------------------------------
# Goals
# --------------------------------------------------------------------------------------------
def option_text(goal_options: dict) -> str:
    text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    return " with " + text if text else ""


def make_goal(product: dict, price: float, goal_options: dict, rng: random.Random) -> dict:
    """A synthetic goal for ``product`` with ``goal_options`` (WebShop's goal dict keys)."""
    goal_options = {k: goal_options[k] for k in sorted(goal_options)}
    price_upper, price_text = rw.price_upper_for(price, rng)
    goal = {
        "asin": product["asin"], "category": product["category"], "query": product["query"],
        "name": product["Title"], "product_category": product["product_category"],
        "instruction_text": product["instruction_text"] + option_text(goal_options) + price_text,
        "attributes": list(product["instruction_attributes"]), "price_upper": price_upper,
        "goal_options": goal_options, "weight": 1.0,
    }
    if product.get(rw.NOUNS_KEY) is not None:
        goal[rw.NOUNS_KEY] = list(product[rw.NOUNS_KEY])
    return goal


def option_combinations(product: dict) -> list:
    """Every combination of one value per option group (WebShop makes one goal of each)."""
    opts = product.get("options") or {}
    names = sorted(opts)
    return [dict(zip(names, combo)) for combo in itertools.product(*(opts[n] for n in names))]


def goal_is_solvable(product: dict, price: float, goal: dict) -> bool:
    """Whether buying ``product`` with the goal's options earns reward 1.0."""
    r = rw.get_reward(product, goal, price=price, options=dict(goal["goal_options"]))
    return r >= 1.0 - 1e-9


def goal_for_product(catalog, i: int, rng: random.Random, tries: int = 8) -> Optional[dict]:
    """One solvable synthetic goal for product ``i`` (a random option combination), or None
    when ``tries`` combinations all fail the solvability check."""
    product = catalog.product(i)
    price = catalog.price(i)
    combos = option_combinations(product)
    for _ in range(max(1, tries)):
        goal = make_goal(product, price, rng.choice(combos), rng)
        if goal_is_solvable(product, price, goal):
            return goal
    return None
