"""WebShop's own data files, loaded as WebShop's ``load_products`` and ``get_goals`` do.

* ``items_shuffle*.json``: a JSON list of scraped products (``asin``, ``name``, ``query``,
  ``category``, ``product_category``, ``full_description``, ``small_description``,
  ``pricing``, ``customization_options``, ``images``, ...);
* ``items_ins_v2*.json``: ``{asin: {"attributes": [...], "instruction": str,
  "instruction_attributes": [...]}}`` (product attributes and the synthetic instruction);
* ``items_human_ins.json``: ``{asin: [{"instruction", "instruction_attributes",
  "instruction_options"}, ...]}`` (the 12k human instructions).

Products are kept in file order, skipping ASINs that are ``"nan"`` or longer than 10
characters and repeated ASINs; ``num_products`` keeps the first N entries (WebShop's small
sets). Option names are lower-cased, option values stripped, ``/`` -> ``" | "``, lower-cased;
``pricing`` ``"$a"`` / ``"$a$b"`` -> ``[a]`` / ``[a, b]`` (``$100.0`` when missing); products
without attributes get ``["DUMMY_ATTR"]``.

Goals: human goals (every human instruction with at least one attribute; ``goal_options`` is
its option list) or synthetic goals (the product's instruction with every combination of its
options), each with WebShop's price bound, then shuffled with ``random.Random(233)`` as
WebShop does, so AgentBench's goal indices (``std`` 0-199, ``dev`` 200-279, ``env_train``
1000-11999) select the same instructions. Two draws that WebShop leaves unseeded (the price of
a product with a price range, and the price bound of each goal, hence the instruction's
``price lower than`` suffix) are drawn here from seeds derived from the ASIN, so every run and
every process sees the same goals.

Malformed files raise ``ValueError`` naming the file, the line and the field.
"""
from __future__ import annotations

import decimal
import hashlib
import itertools
import json
import os
import random
import re
from typing import Any, Iterator, Optional

from harness_jax.envs.webshop import reward as rw
from harness_jax.envs.webshop.generator import option_text, search_document

GOAL_SHUFFLE_SEED = 233


class DataError(ValueError):
    """A WebShop data file is malformed (the message names file, line and field)."""


# --------------------------------------------------------------------------------------------
# JSON with line numbers
# --------------------------------------------------------------------------------------------
_WS = re.compile(r"\s*")


def iter_json_container(path: str, expect: str) -> Iterator[tuple]:
    """Yields ``(key or index, value, line)`` for each element of the top-level JSON list
    (``expect="list"``) or object (``"object"``) in ``path``."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"WebShop data file {path!r} does not exist")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    dec = json.JSONDecoder()
    line, line_pos = 1, 0

    def line_at(pos: int) -> int:
        nonlocal line, line_pos
        line += text.count("\n", line_pos, pos)
        line_pos = pos
        return line

    def fail(pos: int, msg: str) -> DataError:
        return DataError(f"{path}:{line_at(pos)}: {msg}")

    def decode(pos: int):
        try:
            return dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None

    pos = _WS.match(text, 0).end()
    opener, closer = ("[", "]") if expect == "list" else ("{", "}")
    if pos >= len(text) or text[pos] != opener:
        kind = "a JSON list of products" if expect == "list" else "a JSON object keyed by ASIN"
        raise fail(pos, f"expected {kind} (the file must start with {opener!r})")
    pos = _WS.match(text, pos + 1).end()
    if pos < len(text) and text[pos] == closer:
        return
    n = 0
    while True:
        start = pos
        if expect == "list":
            key = n
        else:
            if pos >= len(text) or text[pos] != '"':
                raise fail(pos, "expected a quoted ASIN key")
            key, pos = decode(pos)
            pos = _WS.match(text, pos).end()
            if pos >= len(text) or text[pos] != ":":
                raise fail(pos, f"expected ':' after key {key!r}")
            pos = _WS.match(text, pos + 1).end()
        value, pos = decode(pos)
        yield key, value, line_at(start)
        n += 1
        pos = _WS.match(text, pos).end()
        if pos < len(text) and text[pos] == ",":
            pos = _WS.match(text, pos + 1).end()
            continue
        if pos < len(text) and text[pos] == closer:
            return
        raise fail(pos, f"expected ',' or {closer!r} after element {n}")


# --------------------------------------------------------------------------------------------
# Field checks
# --------------------------------------------------------------------------------------------
def _need_str(v: Any, where: str, field: str, fix: str, allow_none: bool = False) -> str:
    if v is None and allow_none:
        return ""
    if not isinstance(v, str):
        raise DataError(f"{where}.{field}: expected a string, got {type(v).__name__}; {fix}")
    return v


def _str_list(v: Any, where: str, field: str) -> list:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise DataError(f"{where}.{field}: expected a list of strings")
    return list(v)


def parse_pricing(pricing: Any, where: str) -> tuple:
    """``(pricing list, price tag)`` as WebShop's loader computes them."""
    if pricing is None or pricing == "" or pricing == []:
        return [100.0], "$100.0"
    if isinstance(pricing, list):   # already parsed (e.g. our own export)
        try:
            vals = [float(x) for x in pricing][:2]
        except (TypeError, ValueError):
            raise DataError(f"{where}.pricing={pricing!r}: expected numbers") from None
    elif isinstance(pricing, str):
        try:
            vals = [float(decimal.Decimal(re.sub(r"[^\d.]", "", p))) for p in pricing.split("$")[1:]]
        except decimal.InvalidOperation:
            raise DataError(f"{where}.pricing={pricing!r}: not a price like '$12.99' or "
                            "'$10.99 - $15.99'") from None
        if not vals:
            raise DataError(f"{where}.pricing={pricing!r}: no '$' amount in it")
    else:
        raise DataError(f"{where}.pricing: expected a string like '$12.99', got "
                        f"{type(pricing).__name__}")
    if len(vals) == 1:
        return vals, f"${vals[0]}"
    return vals[:2], f"${vals[0]} to ${vals[1]}"


def _options(raw: Any, where: str) -> dict:
    if raw is None or raw == {} or raw == []:
        return {}
    if not isinstance(raw, dict):
        raise DataError(f"{where}.customization_options: expected an object "
                        "{name: [{\"value\": ...}, ...]} or null")
    out = {}
    for name, contents in raw.items():
        if contents is None:
            continue
        if not isinstance(contents, list):
            raise DataError(f"{where}.customization_options[{name!r}]: expected a list of "
                            "{\"value\": ...} objects")
        values = []
        for j, c in enumerate(contents):
            if not isinstance(c, dict) or not isinstance(c.get("value"), str):
                raise DataError(f"{where}.customization_options[{name!r}][{j}].value: "
                                "expected a string")
            values.append(c["value"].strip().replace("/", " | ").lower())
        out[str(name).lower()] = values
    return out


def _seeded(*parts) -> random.Random:
    h = hashlib.blake2b("|".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(h, "big"))


# --------------------------------------------------------------------------------------------
# The product table
# --------------------------------------------------------------------------------------------
class ProductTable:
    """WebShop's products in memory (``catalog`` interface of ``world.World``)."""

    kind = "files"

    def __init__(self, products: list, spec: dict, goals: Optional[list] = None):
        self.products = products
        self.spec = spec
        self._by_asin = {p["asin"]: i for i, p in enumerate(products)}
        self._prices = [self._price(p) for p in products]
        self.goals = goals if goals is not None else []

    @staticmethod
    def _price(p: dict) -> float:
        pricing = p["pricing"]
        if len(pricing) == 1:
            return float(pricing[0])
        return _seeded("webshop-price", p["asin"]).uniform(*pricing[:2])

    def __len__(self) -> int:
        return len(self.products)

    def product(self, i: int) -> dict:
        """The shared product dict (read it, do not modify it)."""
        return self.products[i]

    def price(self, i: int) -> float:
        return self._prices[i]

    def index_of(self, asin: str) -> Optional[int]:
        return self._by_asin.get(str(asin).upper(), self._by_asin.get(str(asin)))

    def documents(self) -> Iterator[str]:
        for p in self.products:
            yield search_document(p)

    @classmethod
    def from_files(cls, products_path: str, attributes_path: str,
                   human_path: Optional[str] = None, num_products: Optional[int] = None,
                   human_goals: Optional[bool] = None) -> "ProductTable":
        """Loads the files; goals are human goals when ``human_path`` is given (unless
        ``human_goals=False``), else synthetic goals."""
        human = bool(human_path) if human_goals is None else bool(human_goals)
        if human and not human_path:
            raise DataError("human goals need items_human_ins.json: give human_instructions")
        attrs = read_attributes(attributes_path)
        human_ins = read_human_instructions(human_path) if human_path else {}
        products = []
        seen = set()
        for k, raw, line in iter_json_container(products_path, "list"):
            if num_products is not None and k >= num_products:
                break
            where = f"{products_path}:{line}: product[{k}]"
            p = _product(raw, where)
            if p is None or p["asin"] in seen:
                continue
            seen.add(p["asin"])
            a = attrs.get(p["asin"], {})
            p["Attributes"] = a.get("attributes") or ["DUMMY_ATTR"]
            if human:
                if p["asin"] in human_ins:
                    p["instructions"] = human_ins[p["asin"]]
            else:
                p["instruction_text"] = a.get("instruction")
                p["instruction_attributes"] = a.get("instruction_attributes")
            products.append(p)
        spec = {"kind": "files", "products": os.path.abspath(products_path),
                "attributes": os.path.abspath(attributes_path),
                "human_instructions": os.path.abspath(human_path) if human_path else None,
                "num_products": num_products}
        table = cls(products, spec)
        table.goals = human_goal_list(table) if human else synthetic_goal_list(table)
        random.Random(GOAL_SHUFFLE_SEED).shuffle(table.goals)
        return table


def _product(raw: Any, where: str) -> Optional[dict]:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    asin = raw.get("asin")
    if not isinstance(asin, str):
        raise DataError(f"{where}.asin: expected a string (the product's ASIN)")
    if asin == "nan" or len(asin) > 10:
        return None
    name = _need_str(raw.get("name"), where, "name", "the product title")
    query = _need_str(raw.get("query"), where, "query", "the search query it was scraped with")
    category = _need_str(raw.get("category"), where, "category", "e.g. 'beauty'")
    pcat = _need_str(raw.get("product_category"), where, "product_category",
                     "the category path, parts separated by ' › '")
    desc = _need_str(raw.get("full_description"), where, "full_description", "the description",
                     allow_none=True)
    small = raw.get("small_description")
    if isinstance(small, list):
        if not all(isinstance(x, str) for x in small):
            raise DataError(f"{where}.small_description: expected strings")
        bullets = small
    elif isinstance(small, str):
        bullets = [small]
    elif small is None:
        bullets = [""]
    else:
        raise DataError(f"{where}.small_description: expected a list of strings or a string")
    pricing, tag = parse_pricing(raw.get("pricing"), where)
    images = raw.get("images")
    if images is not None and not isinstance(images, list):
        raise DataError(f"{where}.images: expected a list of image URLs")
    return {"asin": asin, "category": category, "query": query.lower().strip(),
            "product_category": pcat, "name": name, "Title": name, "Description": desc,
            "BulletPoints": bullets, "pricing": pricing, "Price": tag,
            "options": _options(raw.get("customization_options"), where),
            "option_to_image": {}, "Reviews": [], "Rating": "N.A.",
            "MainImage": images[0] if images else None}


def read_attributes(path: str) -> dict:
    """``items_ins_v2*.json`` -> ``{asin: {"attributes", "instruction",
    "instruction_attributes"}}`` (validated)."""
    out = {}
    for asin, v, line in iter_json_container(path, "object"):
        where = f"{path}:{line}: [{asin!r}]"
        if not isinstance(v, dict):
            raise DataError(f"{where}: expected an object with 'attributes'")
        rec = {}
        if "attributes" in v:
            rec["attributes"] = _str_list(v["attributes"], where, "attributes")
        if v.get("instruction") is not None:
            rec["instruction"] = _need_str(v["instruction"], where, "instruction",
                                           "the synthetic instruction")
            rec["instruction_attributes"] = _str_list(v.get("instruction_attributes"), where,
                                                      "instruction_attributes")
            if not rec["instruction_attributes"]:
                raise DataError(f"{where}.instruction_attributes: empty; a synthetic goal needs "
                                "at least one attribute")
        out[asin] = rec
    return out


def read_human_instructions(path: str) -> dict:
    """``items_human_ins.json`` -> ``{asin: [{"instruction", "instruction_attributes",
    "instruction_options"}, ...]}`` (validated)."""
    out = {}
    for asin, v, line in iter_json_container(path, "object"):
        where = f"{path}:{line}: [{asin!r}]"
        if not isinstance(v, list):
            raise DataError(f"{where}: expected a list of instruction objects")
        recs = []
        for j, r in enumerate(v):
            w = f"{where}[{j}]"
            if not isinstance(r, dict):
                raise DataError(f"{w}: expected an object")
            recs.append({
                "instruction": _need_str(r.get("instruction"), w, "instruction",
                                         "the human instruction text"),
                "instruction_attributes": _str_list(r.get("instruction_attributes", []), w,
                                                    "instruction_attributes"),
                "instruction_options": _str_list(r.get("instruction_options", []), w,
                                                 "instruction_options")})
        out[asin] = recs
    return out


# --------------------------------------------------------------------------------------------
# Goals (WebShop's get_human_goals / get_synthetic_goals)
# --------------------------------------------------------------------------------------------
def _goal_base(p: dict) -> dict:
    return {"asin": p["asin"], "category": p["category"], "query": p["query"],
            "name": p["name"], "product_category": p["product_category"]}


def human_goal_list(table: ProductTable) -> list:
    goals = []
    for i, p in enumerate(table.products):
        for j, ins in enumerate(p.get("instructions") or []):
            if not ins["instruction_attributes"]:
                continue
            upper, text = rw.price_upper_for(table.price(i), _seeded("webshop-goal", p["asin"], j))
            goals.append({**_goal_base(p),
                          "instruction_text": ins["instruction"].strip(".") + text,
                          "attributes": list(ins["instruction_attributes"]),
                          "price_upper": upper,
                          "goal_options": list(ins["instruction_options"]), "weight": 1})
    return goals


def synthetic_goal_list(table: ProductTable) -> list:
    goals = []
    counts: dict = {}
    for i, p in enumerate(table.products):
        if p.get("instruction_text") is None:
            continue
        upper, text = rw.price_upper_for(table.price(i), _seeded("webshop-goal", p["asin"]))
        names = sorted(p["options"])
        for combo in itertools.product(*(p["options"][n] for n in names)):
            opts = dict(zip(names, combo))
            goals.append({**_goal_base(p), "name": p["Title"],
                          "instruction_text": p["instruction_text"] + option_text(opts) + text,
                          "attributes": list(p["instruction_attributes"]),
                          "price_upper": upper, "goal_options": opts})
            for a in p["instruction_attributes"]:
                counts[a] = counts.get(a, 0) + 1
    for g in goals:
        g["weight"] = sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
    return goals
