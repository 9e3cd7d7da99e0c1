import pytest

from minijson import dumps, loads


def test_scalars():
    assert dumps(None) == "null"
    assert dumps(True) == "true"
    assert dumps(False) == "false"
    assert dumps(42) == "42"
    assert dumps(-1.5) == "-1.5"


def test_string_escapes():
    assert dumps('a"b\\c\n') == r'"a\"b\\c\n"'
    assert dumps("\x01") == r'"\u0001"'


def test_ensure_ascii():
    assert dumps("é") == r'"\u00e9"'
    assert dumps("é", ensure_ascii=False) == '"é"'
    assert dumps("\U0001F600") == r'"\ud83d\ude00"'


def test_tilde_is_ascii():
    assert dumps("~") == '"~"'


def test_nan_rejected_by_default():
    with pytest.raises(ValueError):
        dumps(float("nan"))
    assert dumps(float("inf"), allow_nan=True) == "Infinity"
    assert dumps(float("-inf"), allow_nan=True) == "-Infinity"


def test_lists_and_dicts():
    assert dumps([1, [2, 3], []]) == "[1, [2, 3], []]"
    assert dumps({"a": 1, "b": {}}) == '{"a": 1, "b": {}}'
    assert dumps((1, 2)) == "[1, 2]"


def test_sort_keys():
    assert dumps({"b": 1, "a": 2}, sort_keys=True) == '{"a": 2, "b": 1}'
    assert dumps({"b": 1, "a": 2}) == '{"b": 1, "a": 2}'


def test_compact_separators():
    assert dumps({"a": [1, 2]}, separators=(",", ":")) == '{"a":[1,2]}'


def test_indent():
    assert dumps({"a": [1, 2]}, indent=2) == '{\n  "a": [\n    1,\n    2\n  ]\n}'


def test_non_string_keys_rejected():
    with pytest.raises(TypeError):
        dumps({1: "x"})


def test_unserializable():
    with pytest.raises(TypeError, match="set"):
        dumps({1, 2})


def test_bool_is_not_number():
    from minijson.encoder import encode_number
    with pytest.raises(TypeError):
        encode_number(True)


def test_round_trip():
    doc = {"name": "widget", "tags": ["a", "b"], "price": 9.5, "stock": 0, "meta": None,
           "nested": {"deep": [True, False, {"x": "é\n"}]}}
    assert loads(dumps(doc)) == doc
    assert loads(dumps(doc, indent=4, sort_keys=True)) == doc
