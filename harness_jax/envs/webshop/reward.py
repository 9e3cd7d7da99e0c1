"""WebShop's published reward (``web_agent_site/engine/goal.py``), on WebShop's own dict formats.

    r = r_type * (n_attributes_matched + n_options_matched + r_price)
              / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)

* ``get_type_reward``: ``query_match`` (same search query), ``category_match`` (at least two of
  the ``›``-separated ``product_category`` parts shared, order ignored) and ``title_score`` =
  |nouns(purchased name) ∩ nouns(goal name)| / len(nouns(goal name)) (the goal's noun *list*,
  duplicates counted; 0.2 when the goal name has no noun). ``r_type`` is 1.0; 0.5 when nothing
  matches (no query match, no category match, title_score <= 0.2); then 0.1 when title_score
  < 0.1 and 0.0 when it is 0, whatever matched.
* ``get_attribute_reward``: a goal attribute counts when ``token_set_ratio`` > 85 against one
  of the product's ``Attributes``, else when it is a substring of the lower-cased ``Title``,
  ``' '.join(BulletPoints)`` or ``Description``.
* ``get_option_reward``: both sides go through ``normalize_color`` (the first ``COLOR_SET``
  word contained in the value), then a goal option counts when ``token_set_ratio`` > 85
  against one purchased option. ``get_reward`` passes ``goal_options.items()`` when the goal's
  options are a dict (synthetic goals), so those goal options are ``(name, value)`` pairs, as
  in WebShop: a pair whose value is exactly a colour word normalises to it, any other pair is
  compared as the text of the pair.
* ``r_price`` = ``price <= goal["price_upper"]``.

Fuzzy scores reproduce ``thefuzz.fuzz.token_set_ratio`` (the scorer WebShop calls) on
``rapidfuzz``: ``str()`` of the value, characters 128-255 removed, rapidfuzz's
``default_process``, then ``int(round(score))``.

Title nouns are pluggable (``set_noun_extractor``): a product or goal dict carrying
``name_nouns`` (the generated catalog records each title's nouns when it writes the title) uses
that list; otherwise the active extractor runs on ``name``: spaCy (POS NOUN/PROPN, lower-cased,
as WebShop) when an English pipeline (``en_core_web_sm``/``md``/``lg``/``trf``) is installed,
else ``fallback_nouns`` (documented there).
"""
from __future__ import annotations

import functools
import importlib.util
import re
import threading
from typing import Any, Callable, Iterable, Optional, Sequence, Union

# WebShop's colour vocabulary (web_agent_site/engine/normalize.py), order matters: the first
# word contained in a value wins.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)
PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))   # goal price bounds: $10 ... $990
FUZZY_THRESHOLD = 85                                   # token_set_ratio must exceed this
NOUNS_KEY = "name_nouns"                               # recorded title nouns (generated data)


# --------------------------------------------------------------------------------------------
# Fuzzy matching and colour normalisation
# --------------------------------------------------------------------------------------------
_HIGH_LATIN1 = {i: None for i in range(128, 256)}


def _full_process(value: Any) -> str:
    from rapidfuzz import utils as rf_utils
    return rf_utils.default_process(str(value).translate(_HIGH_LATIN1))


def token_set_ratio(a: Any, b: Any) -> int:
    """``thefuzz.fuzz.token_set_ratio(a, b)`` (0-100, an int) computed with rapidfuzz."""
    from rapidfuzz import fuzz
    if a is None or b is None:
        return 0
    return int(round(fuzz.token_set_ratio(_full_process(a), _full_process(b))))


def normalize_color(value: Any) -> Any:
    """The first ``COLOR_SET`` word contained in ``value`` (substring test on strings, element
    test on the ``(name, value)`` pairs of dict goal options), else ``value`` unchanged."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


# --------------------------------------------------------------------------------------------
# Title nouns (pluggable)
# --------------------------------------------------------------------------------------------
_FALLBACK_STOP = frozenset("""
a an and are as at be but by for from if in into is it its no not of off on or per such that the
their then there these they this to was will with without w up over under your you our we my all
any each every new one two three four five six seven eight nine ten pcs pc set
""".split())
_WORD = re.compile(r"[A-Za-z0-9]+(?:[.'’&][A-Za-z0-9]+)*\.?")


def fallback_nouns(text: str) -> list:
    """The documented noun extractor used when no spaCy English pipeline is installed.

    Product titles are noun phrases of title-cased words, which spaCy tags NOUN/PROPN almost
    throughout; the fallback keeps every word token (letters/digits with inner ``.``, ``'``,
    ``&``) that contains a letter, is at least 2 characters long and is not a function word or
    count word (``_FALLBACK_STOP``), lower-cased, in order, duplicates kept. It over-counts
    adjectives relative to spaCy, so title scores drift by a few hundredths on real titles; the
    generated catalog never uses it (it records its nouns).
    """
    out = []
    for tok in _WORD.findall(text or ""):
        t = tok.lower().rstrip(".") if tok.count(".") == 1 else tok.lower()
        if len(t) < 2 or not any(c.isalpha() for c in t) or t in _FALLBACK_STOP:
            continue
        out.append(t)
    return out


SPACY_MODELS = ("en_core_web_sm", "en_core_web_md", "en_core_web_lg", "en_core_web_trf")


def installed_spacy_model() -> Optional[str]:
    """The first installed English spaCy pipeline package (checked without importing spaCy)."""
    for name in SPACY_MODELS:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


class SpacyNouns:
    """WebShop's extractor: tokens whose POS is NOUN/PROPN, lower-cased, in order (duplicates
    kept). The pipeline loads on first use (spaCy itself takes seconds to import)."""

    def __init__(self, model: str = "en_core_web_sm"):
        self.model = model
        self._nlp = None
        self._lock = threading.Lock()

    def __call__(self, text: str) -> list:
        if self._nlp is None:
            with self._lock:
                if self._nlp is None:
                    import spacy
                    self._nlp = spacy.load(self.model)
        with self._lock:   # spaCy pipelines are not documented as thread-safe
            doc = self._nlp(text or "")
        return [t.text.lower() for t in doc if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


_EXTRACTOR: Optional[Callable[[str], list]] = None
_EXTRACTOR_LOCK = threading.Lock()


def set_noun_extractor(extractor: Union[None, str, Callable[[str], Sequence[str]]]) -> None:
    """Chooses how title nouns are found for dicts without recorded ``name_nouns``:
    ``"fallback"``, ``"spacy"`` (the first installed English pipeline), ``"spacy:<model>"``,
    any callable ``text -> list of nouns``, or None (automatic: spaCy if installed, else the
    fallback)."""
    global _EXTRACTOR
    if extractor is None or callable(extractor):
        fn = extractor
    elif extractor == "fallback":
        fn = fallback_nouns
    elif isinstance(extractor, str) and extractor.startswith("spacy"):
        model = extractor.partition(":")[2] or installed_spacy_model()
        if not model or importlib.util.find_spec(model) is None:
            raise ValueError(f"set_noun_extractor({extractor!r}): no spaCy English pipeline is "
                             f"installed (looked for {model or ', '.join(SPACY_MODELS)}); install "
                             "one, or use 'fallback'")
        fn = SpacyNouns(model)
    else:
        raise ValueError(f"set_noun_extractor({extractor!r}): expected 'fallback', 'spacy', "
                         "'spacy:<model>', a callable or None")
    with _EXTRACTOR_LOCK:
        _EXTRACTOR = fn
    _cached_nouns.cache_clear()


def noun_extractor() -> Callable[[str], list]:
    """The active extractor (resolving the automatic choice on first use)."""
    global _EXTRACTOR
    if _EXTRACTOR is None:
        with _EXTRACTOR_LOCK:
            if _EXTRACTOR is None:
                model = installed_spacy_model()
                _EXTRACTOR = SpacyNouns(model) if model else fallback_nouns
    return _EXTRACTOR


@functools.lru_cache(maxsize=65536)
def _cached_nouns(text: str) -> tuple:
    return tuple(noun_extractor()(text))


def title_nouns(item: dict) -> list:
    """Nouns of ``item["name"]``: the recorded ``name_nouns`` when present, else extracted."""
    rec = item.get(NOUNS_KEY)
    if rec is not None:
        return list(rec)
    return list(_cached_nouns(str(item.get("name") or "")))


# --------------------------------------------------------------------------------------------
# The reward
# --------------------------------------------------------------------------------------------
def get_type_reward(purchased_product: dict, goal: dict) -> dict:
    """``{"r_type", "query_match", "category_match", "title_score"}`` (module docstring)."""
    query_match = purchased_product["query"] == goal["query"]
    p_cat = {x.strip() for x in str(purchased_product["product_category"]).split("›")}
    g_cat = {x.strip() for x in str(goal["product_category"]).split("›")}
    category_match = len(p_cat & g_cat) >= 2
    p_nouns = title_nouns(purchased_product)
    g_nouns = title_nouns(goal)
    n_shared = len(set(p_nouns) & set(g_nouns))
    title_score = 0.2 if not g_nouns else n_shared / len(g_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return dict(r_type=r_type, query_match=query_match, category_match=category_match,
                title_score=title_score)


def _joined(value: Any) -> str:
    # WebShop joins BulletPoints with ' '.join, which spreads a plain string into letters
    return " ".join(value) if value is not None else ""


def get_attribute_reward(purchased_product: dict, goal: dict) -> tuple:
    """``(r_attr, num_attr_matches)``: fuzzy match against ``Attributes``, then substrings of
    the title, bullet points and description."""
    p_attrs = purchased_product.get("Attributes") or []
    g_attrs = goal["attributes"]
    n = 0
    for g_attr in g_attrs:
        if any(token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in p_attrs):
            n += 1
            continue
        if (g_attr in str(purchased_product.get("Title", "")).lower()
                or g_attr in _joined(purchased_product.get("BulletPoints", [])).lower()
                or g_attr in str(purchased_product.get("Description", "")).lower()):
            n += 1
    r_attr = n / len(g_attrs) if g_attrs else 0.0
    return r_attr, n


def get_option_reward(purchased_options: Iterable, goal_options: Iterable) -> tuple:
    """``(r_option or None when the goal has no options, num_option_matches)``."""
    p_opts = [normalize_color(o) for o in purchased_options]
    g_opts = [normalize_color(o) for o in goal_options]
    n = 0
    for g in g_opts:
        if any(token_set_ratio(p, g) > FUZZY_THRESHOLD for p in p_opts):
            n += 1
    r_option = n / len(g_opts) if g_opts else None
    return r_option, n


def _goal_option_list(goal_options: Any) -> list:
    return list(goal_options.items()) if isinstance(goal_options, dict) else list(goal_options)


def get_reward(purchased_product: dict, goal: dict, price: float, options: dict,
               verbose: bool = False, **_: Any):
    """The total reward in [0, 1]; with ``verbose=True`` ``(reward, info)`` as WebShop returns
    (``r_type``, ``r_att``, ``w_att``, ``query_match``, ``category_match``, ``title_score``,
    and ``r_option``/``w_option``, ``r_price``/``w_price`` when defined). A goal without a
    positive ``price_upper`` has no price term (WebShop would fail on it)."""
    r_type = get_type_reward(purchased_product, goal)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    r_att, n_att = get_attribute_reward(purchased_product, goal)
    goal_opts = _goal_option_list(goal["goal_options"])
    r_option, n_opt = get_option_reward(list(options.values()), goal_opts)
    denom = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    total = (n_att + n_opt + (float(r_price) if r_price is not None else 0.0)) / denom
    total *= r_type["r_type"]
    if not verbose:
        return total
    info = {"r_type": r_type["r_type"], "r_att": r_att, "w_att": len(goal["attributes"]) / denom,
            "query_match": r_type["query_match"], "category_match": r_type["category_match"],
            "title_score": r_type["title_score"]}
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(goal["goal_options"]) / denom
    if r_price is not None:
        info["r_price"] = r_price
        info["w_price"] = 1 / denom
    return total, info


def price_upper_for(price: float, rng) -> tuple:
    """WebShop's goal price bound: the larger of two draws from the first four ``PRICE_RANGE``
    steps above ``price`` -> ``(price_upper, instruction suffix)``; ``(1000000, "")`` when
    fewer than two steps remain."""
    steps = [p for p in PRICE_RANGE if p > price][:4]
    if len(steps) >= 2:
        _, upper = sorted(rng.sample(steps, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000, ""
