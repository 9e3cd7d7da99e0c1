"""WebShop's site in text mode: pages, clickables, actions and their transitions.

This re-implements what ``WebAgentTextEnv(observation_mode="text")`` shows and accepts:

* **Observation**: the visible texts of the page, stripped, joined by ``" [SEP] "``.
* **Pages** (what each shows, in order):
  search: ``WebShop``, ``Instruction:``, the instruction, ``Search``;
  results: ``Instruction:``, instruction, ``Back to Search``, ``Page N (Total results: T)``,
  ``< Prev`` (page > 1), ``Next >``, then per product ASIN, title, price tag (10 per page of
  the top 50);
  item: ``Instruction:``, instruction, ``Back to Search``, ``< Prev``, each option name and its
  values, title, ``Price: ...``, ``Rating: ...``, ``Description``, ``Features``, ``Reviews``,
  (``Attributes`` when ``show_attrs``), ``Buy Now``;
  sub-pages: ``Instruction:``, instruction, ``Back to Search``, ``< Prev``, then the
  description / each bullet point / each review (quoted title, score, body) / the attributes
  and the category, query and category path;
  done: the thank-you page with the purchase and the score.
* **Available actions**: ``{"has_search_bar": bool, "clickables": [...]}``; clickables are the
  lower-cased button texts and product links (ASINs) in page order, then the option values.
* **Actions**: ``search[keywords]`` and ``click[value]``, matched with ``(.+)\\[(.+)\\]`` from
  the start and the argument lower-cased. ``search`` works from any page with a non-empty
  argument; ``click`` needs a listed clickable other than ``search``. Anything else does
  nothing (same page, reward 0).
* **Transitions** (in WebShop's order): ``buy now`` ends the episode with the reward;
  ``back to search`` returns to the search page (clearing the browsing state); ``next >`` /
  ``< prev`` move between result pages; ``< prev`` on an item page re-runs the search (options
  cleared), on a sub-page returns to the item; ``description``/``features``/``reviews``/
  ``attributes`` open a sub-page; a product link opens its item page; an option value selects
  that option.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Optional

END_BUTTON = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
PRODUCT_WINDOW = 10
SEP = " [SEP] "

INDEX, RESULTS, ITEM, SUB, DONE = "index", "search_results", "item_page", "item_sub_page", "done"
_ACTION = re.compile(r"(.+)\[(.+)\]")


def parse_action(action: str) -> tuple:
    """WebShop's ``parse_action``: ``(name, argument or None)``."""
    m = _ACTION.match(action)
    if m is None:
        return action, None
    return m.group(1), m.group(2)


@dataclasses.dataclass
class Clickable:
    kind: str                      # "button" | "product" | "option"
    text: str                      # as shown
    option_name: Optional[str] = None


@dataclasses.dataclass
class Session:
    """One episode's browsing state (WebShop's ``user_sessions[session_id]``)."""

    goal: dict
    page: str = INDEX
    keywords: Optional[list] = None
    page_no: Optional[int] = None
    results: list = dataclasses.field(default_factory=list)   # catalog indices, best first
    product: Optional[int] = None                             # catalog index of the item
    options: dict = dataclasses.field(default_factory=dict)
    sub_page: Optional[str] = None
    texts: list = dataclasses.field(default_factory=list)
    clickables: dict = dataclasses.field(default_factory=dict)
    reward: Optional[float] = None
    reward_info: Optional[dict] = None

    @property
    def observation(self) -> str:
        return SEP.join(self.texts)

    @property
    def has_search_bar(self) -> bool:
        return self.page == INDEX

    def available_actions(self) -> dict:
        return {"has_search_bar": self.has_search_bar, "clickables": list(self.clickables)}


class Site:
    """The shop over one ``World`` (catalog + search index), shared by every session."""

    def __init__(self, world, show_attrs: bool = False):
        self.world = world
        self.show_attrs = show_attrs

    # -- rendering -----------------------------------------------------------------------------
    @staticmethod
    def _set(s: Session, texts: list, buttons: list, products: tuple = (),
             options: tuple = ()) -> None:
        s.texts = [t for t in (str(x).strip() for x in texts) if t]
        clk: dict = {}
        for b in buttons:
            clk[b.lower()] = Clickable("button", b)
        for asin in products:
            clk[asin.lower()] = Clickable("product", asin)
        for name, value in options:
            clk[str(value)] = Clickable("option", str(value), option_name=name)
        s.clickables = clk

    def _head(self, s: Session) -> list:
        return ["Instruction:", s.goal["instruction_text"]]

    def render_index(self, s: Session) -> None:
        self._set(s, ["WebShop"] + self._head(s) + ["Search"], ["Search"])

    def render_results(self, s: Session) -> None:
        start = (s.page_no - 1) * PRODUCT_WINDOW
        shown = s.results[start:start + PRODUCT_WINDOW] if start >= 0 else []
        texts = self._head(s) + [BACK_TO_SEARCH, f"Page {s.page_no} (Total results: "
                                                 f"{len(s.results)})"]
        buttons = [BACK_TO_SEARCH]
        if s.page_no > 1:
            texts.append(PREV_PAGE)
            buttons.append(PREV_PAGE)
        texts.append(NEXT_PAGE)
        buttons.append(NEXT_PAGE)
        asins = []
        for i in shown:
            p = self.world.product(i)
            texts += [p["asin"], p["Title"], p["Price"]]
            asins.append(p["asin"])
        self._set(s, texts, buttons, products=tuple(asins))

    def render_item(self, s: Session) -> None:
        p = self.world.product(s.product)
        texts = self._head(s) + [BACK_TO_SEARCH, PREV_PAGE]
        opts = []
        for name, values in (p.get("options") or {}).items():
            texts.append(name)
            for v in values:
                texts.append(v)
                opts.append((name, v))
        texts += [p["Title"], f"Price: {p['Price']}", f"Rating: {p.get('Rating', 'N.A.')}"]
        subs = [x for x in SUB_PAGES if x != "Attributes" or self.show_attrs]
        texts += subs + [END_BUTTON]
        self._set(s, texts, [BACK_TO_SEARCH, PREV_PAGE] + subs + [END_BUTTON],
                  options=tuple(opts))

    def render_sub(self, s: Session) -> None:
        p = self.world.product(s.product)
        texts = self._head(s) + [BACK_TO_SEARCH, PREV_PAGE]
        if s.sub_page == "Description":
            texts.append(p.get("Description") or "")
        elif s.sub_page == "Features":
            bp = p.get("BulletPoints") or []
            texts += list(bp) if isinstance(bp, list) else [bp]
        elif s.sub_page == "Reviews":
            for r in p.get("Reviews") or []:
                texts += [f'"{r.get("title", "")}"', str(r.get("score", "")), r.get("body", "")]
        else:
            texts += list(p.get("Attributes") or [])
            texts += [p.get("category", ""), p.get("query", ""), p.get("product_category", "")]
        self._set(s, texts, [BACK_TO_SEARCH, PREV_PAGE])

    def render_done(self, s: Session) -> None:
        p = self.world.product(s.product)
        texts = ["Thank you for shopping with us!", "Your code:", "None",
                 "(Paste it in your MTurk interface.)", "Purchased", "asin", p["asin"],
                 "options", json.dumps(s.options), "attrs", "None", "category", "None",
                 "query", "None", "product category", "None", "Target", "asin", "options",
                 "attrs", "price upper", "instuction text", "category", "product category",
                 "query", "Goal", "None", "Reward", "Your score (min 0.0, max 1.0)",
                 str(s.reward), "Reward Details", "None"]
        self._set(s, texts, [])

    # -- transitions ---------------------------------------------------------------------------
    def start(self, s: Session) -> None:
        s.page, s.keywords, s.page_no, s.product, s.sub_page = INDEX, None, None, None, None
        s.results, s.options = [], {}
        self.render_index(s)

    def search(self, s: Session, keywords: list, page_no: int = 1) -> None:
        if keywords != s.keywords:   # WebShop re-runs the (deterministic) search each time
            s.results = self.world.search(" ".join(keywords))
        s.page, s.keywords, s.page_no, s.product, s.options = RESULTS, keywords, page_no, None, {}
        self.render_results(s)

    def click(self, s: Session, name: str) -> Optional[float]:
        """Applies a click on clickable ``name``; returns the reward when the episode ends."""
        target = s.clickables[name]
        if name == END_BUTTON.lower():
            goal = s.goal
            s.reward, s.reward_info = self.world.reward(s.product, goal, s.options)
            s.page = DONE
            self.render_done(s)
            return s.reward
        if name == BACK_TO_SEARCH.lower():
            self.start(s)
        elif name == NEXT_PAGE.lower() and s.page == RESULTS:
            self.search(s, s.keywords, s.page_no + 1)
        elif name == PREV_PAGE.lower() and s.page == RESULTS:
            self.search(s, s.keywords, s.page_no - 1)
        elif name == PREV_PAGE.lower() and s.page == SUB:
            s.page = ITEM
            self.render_item(s)
        elif name == PREV_PAGE.lower() and s.page == ITEM:
            self.search(s, s.keywords, s.page_no)
        elif name in {x.lower() for x in SUB_PAGES}:
            s.page = SUB
            s.sub_page = next(x for x in SUB_PAGES if x.lower() == name)
            self.render_sub(s)
        else:
            if target.kind == "product":
                idx = self.world.index_of(name.upper())
                if idx is None:
                    raise KeyError(f"clicked product {name!r} is not in the catalog")
                s.product = idx
            elif target.kind == "option":
                s.options[target.option_name.lower()] = name
            s.page = ITEM
            self.render_item(s)
        return None

    def step(self, s: Session, action: str) -> tuple:
        """One WebShop action -> ``(reward, done, valid)``; invalid actions change nothing."""
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        if name == "search" and arg:
            self.search(s, arg.split(" "))
            return 0.0, False, True
        if name == "click" and arg in s.clickables and arg != "search":
            r = self.click(s, arg)
            return (r, True, True) if r is not None else (0.0, False, True)
        return 0.0, False, False
