"""WebShop's own data files (items_shuffle*.json, items_ins_v2*.json, items_human_ins.json):
a small hand-made set in that format is loaded, indexed and played; malformed files name the
file, the line and the field."""
import json
import random

import pytest

from harness_jax.envs import registry, webshop
from harness_jax.envs.webshop import agents, data

PRODUCTS = [
    {"asin": "B000VOHH8I", "category": "beauty", "query": "Eau de Toilette ",
     "name": "L'eau Vive Eau de Toilette Spray for Men, 6.7 Fl Oz Bottle",
     "product_category": "Beauty & Personal Care › Fragrance › Men's › Eau de Toilette",
     "full_description": "A fresh aquatic scent for everyday wear.",
     "small_description": ["Long lasting citrus and woody notes", "Made in France"],
     "pricing": "$64.98", "images": ["https://example.invalid/1.jpg"],
     "customization_options": {"Size": [{"value": "2.5 fl oz", "image": None},
                                        {"value": "6.76 fl oz (pack of 1)", "image": None}]},
     "brand": "dropped", "list_price": "dropped"},
    {"asin": "B07ZPL8N3D", "category": "food", "query": "ground coffee",
     "name": "Solvi Dark Roast Ground Coffee, Fair Trade",
     "product_category": "Grocery & Gourmet Food › Beverages › Coffee › Ground Coffee",
     "full_description": "Bold and smooth.", "small_description": "Roasted in small batches",
     "pricing": "$10.99$15.49", "images": [],
     "customization_options": {"Flavor Name": [{"value": "Hazelnut/Vanilla"},
                                               {"value": "Original"}],
                               "Size": [{"value": "12 Ounce"}, {"value": "2 Pound"}],
                               "Color": None}},
    {"asin": "nan", "category": "food", "query": "x", "name": "skipped", "product_category": "",
     "full_description": "", "small_description": [], "pricing": "", "images": [],
     "customization_options": None},
    {"asin": "B07ZPL8N3D", "category": "food", "query": "duplicate", "name": "skipped",
     "product_category": "", "full_description": "", "small_description": [], "pricing": "",
     "images": [], "customization_options": None},
    {"asin": "B01H8PGKZS", "category": "fashion", "query": "men's running shoes",
     "name": "Peak Men's Trail Running Shoes, Non Slip Rubber Sole",
     "product_category": "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
     "full_description": None, "small_description": ["Breathable mesh upper"],
     "pricing": None, "images": [], "customization_options": {
         "Color": [{"value": "Black"}, {"value": "Navy Blue"}],
         "Size": [{"value": "9"}, {"value": "10"}]}},
]
ATTRIBUTES = {
    "B000VOHH8I": {"attributes": ["long lasting", "fresh scent"],
                   "instruction": "i need a long lasting eau de toilette for men",
                   "instruction_attributes": ["long lasting"]},
    "B07ZPL8N3D": {"attributes": ["fair trade", "dark roast"],
                   "instruction": "i want fair trade dark roast ground coffee",
                   "instruction_attributes": ["fair trade", "dark roast"]},
    "B01H8PGKZS": {"attributes": ["non slip", "rubber sole"]},
}
HUMAN = {
    "B000VOHH8I": [{"asin": "B000VOHH8I",
                    "instruction": "i need a long lasting 6.76 fl oz bottle of eau de toilette.",
                    "instruction_attributes": ["long lasting"],
                    "instruction_options": ["6.76 fl oz (pack of 1)"]}],
    "B07ZPL8N3D": [{"instruction": "fair trade ground coffee in hazelnut vanilla",
                    "instruction_attributes": ["fair trade"],
                    "instruction_options": ["hazelnut | vanilla", "12 ounce"]},
                   {"instruction": "any coffee", "instruction_attributes": [],
                    "instruction_options": []}],
    "B01H8PGKZS": [{"instruction": "non slip men's running shoes in navy blue",
                    "instruction_attributes": ["non slip"],
                    "instruction_options": ["navy blue", "10"]}],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("webshop_data")
    paths = {}
    for name, obj in (("items_shuffle_5.json", PRODUCTS), ("items_ins_v2_5.json", ATTRIBUTES),
                      ("items_human_ins.json", HUMAN)):
        p = d / name
        p.write_text(json.dumps(obj, indent=2, ensure_ascii=False))
        paths[name] = str(p)
    return paths


def _table(files, **kw):
    return data.ProductTable.from_files(files["items_shuffle_5.json"],
                                        files["items_ins_v2_5.json"], **kw)


def test_products_load_as_webshop_does(files):
    t = _table(files, human_path=files["items_human_ins.json"])
    assert [p["asin"] for p in t.products] == ["B000VOHH8I", "B07ZPL8N3D", "B01H8PGKZS"]
    perfume, coffee, shoes = t.products
    assert perfume["Title"] == perfume["name"] and perfume["query"] == "eau de toilette"
    assert perfume["pricing"] == [64.98] and perfume["Price"] == "$64.98"
    assert perfume["options"] == {"size": ["2.5 fl oz", "6.76 fl oz (pack of 1)"]}
    assert perfume["MainImage"] == "https://example.invalid/1.jpg" and "brand" not in perfume
    assert coffee["pricing"] == [10.99, 15.49] and coffee["Price"] == "$10.99 to $15.49"
    assert 10.99 <= t.price(1) <= 15.49 and t.price(1) == _table(files).price(1)
    assert coffee["options"] == {"flavor name": ["hazelnut | vanilla", "original"],
                                 "size": ["12 ounce", "2 pound"]}
    assert coffee["BulletPoints"] == ["Roasted in small batches"]
    assert shoes["pricing"] == [100.0] and shoes["Price"] == "$100.0"
    assert shoes["Description"] == "" and shoes["Attributes"] == ["non slip", "rubber sole"]
    assert t.index_of("b01h8pgkzs") == 2 and t.index_of("B000000000") is None


def test_human_and_synthetic_goals(files):
    human = _table(files, human_path=files["items_human_ins.json"]).goals
    assert len(human) == 3     # the instruction without attributes is skipped, as in WebShop
    by_asin = {g["asin"]: g for g in human}
    g = by_asin["B000VOHH8I"]
    assert g["instruction_text"].startswith("i need a long lasting 6.76 fl oz bottle of eau de "
                                            "toilette, and price lower than ")
    assert g["goal_options"] == ["6.76 fl oz (pack of 1)"] and g["price_upper"] > 64.98
    # WebShop's order (products, then instructions) shuffled with random.seed(233)
    order = [("B000VOHH8I", 0), ("B07ZPL8N3D", 0), ("B01H8PGKZS", 0)]
    random.Random(233).shuffle(order)
    assert [x["asin"] for x in human] == [a for a, _ in order]
    synth = _table(files).goals          # no human file: synthetic goals, every combination
    assert len(synth) == 2 + 4 and {g["asin"] for g in synth} == {"B000VOHH8I", "B07ZPL8N3D"}
    coffee = [g for g in synth if g["asin"] == "B07ZPL8N3D"]
    assert {tuple(g["goal_options"].items()) for g in coffee} == {
        (("flavor name", f), ("size", s)) for f in ("hazelnut | vanilla", "original")
        for s in ("12 ounce", "2 pound")}
    assert all(g["instruction_text"].startswith("i want fair trade dark roast ground coffee with "
                                                "flavor name: ") for g in coffee)
    assert all(abs(g["weight"] - 1 / 4) < 1e-12 for g in coffee)


def test_file_world_plays_through_the_registry(files):
    kw = dict(products=files["items_shuffle_5.json"], attributes=files["items_ins_v2_5.json"],
              human_instructions=files["items_human_ins.json"])
    tasks = [t for s in ("train", "search", "selection")
             for t in registry.load_split("webshop", s, **kw)]
    with registry.sealed_test_access("webshop data unit test"):
        tasks += registry.load_split("webshop", "test", **kw)
    assert sorted(t.data["goal_index"] for t in tasks) == [0, 1, 2]
    with registry.sealed_test_access("webshop data unit test"):
        ab = registry.load_split("webshop", "test", partition="agentbench", **kw)
    assert [t.data["goal_index"] for t in ab] == [0, 1, 2]      # AgentBench std = goals 0-199
    assert registry.load_split("webshop", "selection", partition="agentbench", **kw) == []
    world = webshop.get_world(tasks[0].data["world"])
    assert world.goals and len(world) == 3
    env = webshop.WebShopEnv(protocol="text")
    for t in tasks:
        ev = agents.run_policy(env, t, agents.OracleAgent(world, t.data["goal"]))
        assert ev["purchased_asin"] == t.data["goal"]["asin"]
        assert ev["reward_info"]["r_type"] == 1.0 and ev["reward_info"]["r_att"] == 1.0
        # human goals name options loosely; the oracle picks the closest values on the page
        assert ev["reward"] == 1.0, ev
    with pytest.raises(ValueError, match="both"):
        registry.load_split("webshop", "train", products=files["items_shuffle_5.json"])


@pytest.mark.parametrize("content,match", [
    ('[\n  {"asin": "B1"},\n  {"asin": 5}\n]', r"items_shuffle_bad\.json:2: product\[0\]\.name"),
    ('[\n  {"asin": "B1", "name": "n", "query": "q", "category": "c",\n'
     '   "product_category": "p", "full_description": "", "small_description": [],\n'
     '   "pricing": "$", "images": []}\n]', r":2: product\[0\]\.pricing='\$'"),
    ('[\n {"asin": "B1", "name": "n", "query": "q", "category": "c",\n'
     '  "product_category": "p", "full_description": "", "small_description": [],\n'
     '  "pricing": "$1", "images": [],\n  "customization_options": {"size": [{"v": 1}]}}\n]',
     r":2: product\[0\]\.customization_options\['size'\]\[0\]\.value"),
    ('[\n  {"asin": "B1",\n  "name": }\n]', r"items_shuffle_bad\.json:3:\d+: not valid JSON"),
    ('{"asin": "B1"}', r":1: expected a JSON list of products"),
    ('[{"asin": "B1", "name": "n", "query": "q", "category": "c", "product_category": "p", '
     '"full_description": "", "small_description": [], "pricing": "$1", "images": []} '
     '{"asin": "B2"}]', r":1: expected ',' or '\]' after element 1"),
])
def test_malformed_product_files_name_file_line_and_field(tmp_path, files, content, match):
    p = tmp_path / "items_shuffle_bad.json"
    p.write_text(content)
    with pytest.raises(data.DataError, match=match):
        data.ProductTable.from_files(str(p), files["items_ins_v2_5.json"])


def test_malformed_attribute_and_instruction_files(tmp_path, files):
    bad_attrs = tmp_path / "items_ins_v2_bad.json"
    bad_attrs.write_text('{\n  "B1": {"attributes": ["a"]},\n  "B2": {"attributes": "a"}\n}')
    with pytest.raises(data.DataError, match=r"items_ins_v2_bad\.json:3: \['B2'\]\.attributes"):
        data.read_attributes(str(bad_attrs))
    bad_human = tmp_path / "items_human_ins_bad.json"
    bad_human.write_text('{\n "B1": [\n  {"instruction": "x"}],\n "B2": [{"instruction": 3}]\n}')
    with pytest.raises(data.DataError,
                       match=r"items_human_ins_bad\.json:4: \['B2'\]\[0\]\.instruction"):
        data.read_human_instructions(str(bad_human))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.read_attributes(str(tmp_path / "missing.json"))
    with pytest.raises(data.DataError, match="human goals need"):
        _table(files, human_goals=True)
