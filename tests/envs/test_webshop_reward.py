"""WebShop's published reward (harness_jax.envs.webshop.reward) on WebShop's own dict formats.

The reference cases are those of WebShop's public goal tests (tests/web-agent-site/engine/
test_goal.py and test_normalize.py in princeton-nlp/WebShop), stated here in our own words:
the same inputs and expected values. Title scores there come from spaCy's en_core_web_sm;
without an English pipeline installed they run on the documented fallback extractor, whose
scores agree to a few hundredths and fall in the same r_type bands (asserted), and the exact
spaCy values are checked when a pipeline is installed.
"""
import math
import random

import pytest

from harness_jax.envs.webshop import reward as rw

BASKETBALL_GOAL = "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White"
BASKETBALL_BOUGHT = ("PEAK High Top Mens Basketball Shoes Lou Williams Streetball Master "
                     "Breathable Non Slip Outdoor Sneakers")
CORD_GOAL_LONG = ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra "
                  "HD Soundbar Home Theater System Subwoofer")
CORD_GOAL = ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD "
             "Soundbar")
CORD_BOUGHT = ("BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR "
               "Combo Home Theater System")
KNOB = "Rusticware 921ORB Kitchen and Bath Cabinet Knob"
TWEEZERS = ("Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable "
            "Makeup Tweezers (Silver)")
# (goal name, purchased name, WebShop's expected title score with spaCy, tolerance)
TITLE_CASES = [(BASKETBALL_GOAL, BASKETBALL_BOUGHT, 0.333, 1e-2),
               (CORD_GOAL_LONG, CORD_BOUGHT, 0.3, 1e-2),
               (CORD_GOAL, CORD_BOUGHT, 0.15, 1e-2),
               (KNOB, TWEEZERS, 0.0, 0.05)]


@pytest.fixture
def extractor():
    """Restores the automatic noun extractor after a test that changes it."""
    yield rw.set_noun_extractor
    rw.set_noun_extractor(None)


def _band(score):
    return "high" if score > 0.2 else "mid" if score >= 0.1 else "low" if score > 0 else "zero"


def test_type_reward_query_and_category_rules():
    goal = {"query": "Query 1", "product_category": "a › b › c", "name": "Name 1"}
    bought = dict(goal)
    r = rw.get_type_reward(bought, goal)
    assert r == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1.0}
    bought["query"] = "Query 2"
    assert rw.get_type_reward(bought, goal)["query_match"] is False
    # categories: order ignored, at least two shared parts, duplicates count once
    for cat, match in [("b › c › a", True), ("d › e › f", False), ("a › d › b", True),
                       ("a › a › b", True), ("a › a › d", False)]:
        bought["product_category"] = cat
        assert rw.get_type_reward(bought, goal)["category_match"] is match, cat


def test_type_reward_title_scores_fallback(extractor):
    extractor("fallback")
    for goal_name, bought_name, ref, tol in TITLE_CASES:
        r = rw.get_type_reward({"query": "x", "product_category": "p", "name": bought_name},
                               {"query": "y", "product_category": "q", "name": goal_name})
        assert _band(r["title_score"]) == _band(ref) or (ref == 0.0 and r["title_score"] < tol)
        assert abs(r["title_score"] - ref) <= 0.12, (goal_name, r["title_score"])
    # the knob/tweezers case has no noun in common: title score 0 -> r_type 0
    r = rw.get_type_reward({"query": "x", "product_category": "p", "name": TWEEZERS},
                           {"query": "x", "product_category": "p", "name": KNOB})
    assert r["title_score"] == 0.0 and r["r_type"] == 0.0


@pytest.mark.skipif(rw.installed_spacy_model() is None,
                    reason="no spaCy English pipeline installed (en_core_web_sm/md/lg/trf)")
def test_type_reward_title_scores_spacy(extractor):
    extractor("spacy")
    for goal_name, bought_name, ref, tol in TITLE_CASES:
        r = rw.get_type_reward({"query": "x", "product_category": "p", "name": bought_name},
                               {"query": "y", "product_category": "q", "name": goal_name})
        assert math.isclose(r["title_score"], ref, abs_tol=tol) or (
            ref == 0.0 and r["title_score"] < tol), (goal_name, r["title_score"])


def test_type_reward_uses_recorded_nouns_and_the_goal_noun_list(extractor):
    extractor(lambda text: pytest.fail("recorded nouns must be used, not the extractor"))
    goal = {"query": "q", "product_category": "a", "name": "ignored",
            "name_nouns": ["bar", "bar", "cord", "soundbar"]}
    bought = {"query": "other", "product_category": "b", "name": "ignored",
              "name_nouns": ["cord"]}
    # one shared noun over the goal's noun *list* (duplicates count): 1/4 -> > 0.2 -> r_type 1
    r = rw.get_type_reward(bought, goal)
    assert r["title_score"] == 0.25 and r["r_type"] == 1.0
    bought["name_nouns"] = ["soundbar"]
    goal["name_nouns"] = ["a", "b", "c", "d", "e", "soundbar"]        # 1/6: no match -> 0.5
    assert rw.get_type_reward(bought, goal)["r_type"] == 0.5
    goal["name_nouns"] = ["a"] * 10 + ["soundbar"]                    # 1/11 < 0.1 -> 0.1
    assert rw.get_type_reward(bought, goal)["r_type"] == 0.1
    goal["name_nouns"] = []                                          # no goal noun -> 0.2
    assert rw.get_type_reward(bought, goal)["title_score"] == 0.2


def test_attribute_reward_reference_cases():
    goal = {"attributes": ["tea tree", "essential oils", "natural ingredients"]}
    # exact/fuzzy match on Attributes ("essential oil" ~ "essential oils"); no text needed
    assert rw.get_attribute_reward(
        {"Attributes": ["tea tree", "essential oil", "natural ingredients"]}, goal) == (1, 3)
    assert rw.get_attribute_reward(
        {"Attributes": ["essential oil", "natural ingredients"], "Title": "",
         "BulletPoints": [], "Description": ""}, goal) == (2 / 3, 2)
    # found in the bullet points and the description instead
    assert rw.get_attribute_reward(
        {"Attributes": [], "Title": "",
         "BulletPoints": ["This shampoo has essential oils and smells like lemons"],
         "Description": "Best shampoo on the market, made with natural ingredients"},
        goal) == (2 / 3, 2)
    assert rw.get_attribute_reward(
        {"Attributes": ["tea bag", "earl gray", "lipton"], "Title": "English tea for breakfast",
         "BulletPoints": ["Soothing aroma", "Calming, great feeling"],
         "Description": "Best tea made by Lipton, great to pair with breakfast"}, goal) == (0, 0)


def test_option_reward_reference_cases():
    assert rw.get_option_reward(["pack of 12", "grey", "XL"], ["grey", "XL", "pack of 12"]) \
        == (1, 3)
    assert rw.get_option_reward(["pack of 12", "blue", "XL"], ["grey", "XL", "pack of 12"]) \
        == (2 / 3, 2)
    assert rw.get_option_reward(["pack of 12", "powder snow", "XL"],
                                ["cool powder snow", "XL", "pack of 12"]) == (1, 3)
    assert rw.get_option_reward(["goal 1", "goal 2"], []) == (None, 0)
    assert rw.get_option_reward([], ["goal 1", "goal 2"]) == (0, 0)


def test_total_reward_reference_cases(extractor):
    extractor("fallback")
    goal = {"query": "Query 1", "product_category": "a › b › c", "name": BASKETBALL_GOAL,
            "attributes": ["tea tree", "essential oils", "natural ingredients"],
            "goal_options": {"color": "grey", "size": "XL"}, "price_upper": 40.00}
    bought = {"query": "Query 1", "product_category": "a › b › c", "name": BASKETBALL_GOAL,
              "Attributes": ["tea tree", "essential oil", "natural ingredients"],
              "Title": "", "BulletPoints": [], "Description": ""}
    opts = {"color": "grey", "size": "XL"}
    assert rw.get_reward(bought, goal, 35, opts) == 1
    # a plain-string BulletPoints is spread into letters by ' '.join (as in WebShop), so only
    # the description's attribute counts: (1 + 2 options + price) / 6
    bought.update(Attributes=[], Title="",
                  BulletPoints="This shampoo has essential oils and smells like lemons",
                  Description="Best shampoo on the market, made with natural ingredients")
    assert math.isclose(rw.get_reward(bought, goal, 35, opts), 2 / 3, abs_tol=1e-2)
    goal["goal_options"] = {"color": "grey", "size": "XL", "amount": "pack of 12"}
    assert math.isclose(rw.get_reward(bought, goal, 35, opts), 0.5714, abs_tol=1e-2)
    # a different product type: no query/category match, low title overlap -> r_type 0.5
    goal["name"] = CORD_GOAL
    bought.update(name=CORD_BOUGHT, query="Query 2", product_category="a › d › e")
    total, info = rw.get_reward(bought, goal, 35, opts, verbose=True)
    assert math.isclose(total, 0.2857, abs_tol=1e-2)
    assert info["r_type"] == 0.5 and info["r_price"] is True and math.isclose(info["w_price"], 1 / 7)
    # over the price bound: the price term is lost
    assert rw.get_reward(bought, goal, 41, opts) < total


def test_normalize_color_reference_cases():
    for value, expected in [("", ""), ("black forest", "black"), ("violet lavender", "lavender"),
                            ("steelivy fuchsia", "fuchsia"), ("123alabaster", "alabaster"),
                            ("webshop", "webshop")]:
        assert rw.normalize_color(value) == expected
    # dict goal options arrive as (name, value) pairs: element test, not substring
    assert rw.normalize_color(("color", "grey")) == "grey"
    assert rw.normalize_color(("size", "XL")) == ("size", "XL")


def test_token_set_ratio_follows_thefuzz_processing():
    assert rw.token_set_ratio("XL", ("size", "XL")) == 100      # str() of the pair, processed
    assert rw.token_set_ratio("essential oil", "essential oils") == 96
    assert rw.token_set_ratio("Grey!", "grey") == 100            # punctuation and case dropped
    assert rw.token_set_ratio("café", "caf") == 100              # chars 128-255 removed
    assert rw.token_set_ratio(None, "x") == 0
    assert isinstance(rw.token_set_ratio("a b", "a c"), int)


def test_price_upper_follows_price_range():
    rng = random.Random(0)
    for price in (0.5, 9.99, 35.0, 123.4, 975.0):
        upper, text = rw.price_upper_for(price, rng)
        steps = [p for p in rw.PRICE_RANGE if p > price][:4]
        assert upper in steps[1:] and text == f", and price lower than {upper:.2f} dollars"
    assert rw.price_upper_for(985.0, rng) == (1000000, "")


def test_noun_extractor_choice(extractor):
    assert rw.fallback_nouns("Men's Running Shoes for the Trail, 2 Pack") == \
        ["men's", "running", "shoes", "trail", "pack"]
    with pytest.raises(ValueError, match="fallback"):
        extractor("nltk")
    if rw.installed_spacy_model() is None:
        with pytest.raises(ValueError, match="no spaCy English pipeline"):
            extractor("spacy")
        extractor(None)
        assert rw.noun_extractor() is rw.fallback_nouns
