import pytest

from minijson import JSONDecodeError, loads


def test_literals():
    assert loads("true") is True
    assert loads("false") is False
    assert loads("null") is None


def test_integers():
    assert loads("0") == 0
    assert loads("-17") == -17
    assert loads("12345678901234567890") == 12345678901234567890


def test_floats():
    assert loads("3.25") == 3.25
    assert loads("-0.5") == -0.5
    assert loads("1e3") == 1000.0
    assert loads("2.5E-2") == 0.025


def test_number_type():
    assert isinstance(loads("10"), int)
    assert isinstance(loads("10.0"), float)


def test_leading_zero_rejected():
    with pytest.raises(JSONDecodeError):
        loads("012")


def test_bad_numbers():
    for text in ("-", "1.", "1e", "1e+", ".5"):
        with pytest.raises(JSONDecodeError):
            loads(text)


def test_strings_and_escapes():
    assert loads('"hello"') == "hello"
    assert loads(r'"a\"b\\c\/d"') == 'a"b\\c/d'
    assert loads(r'"line\nbreak\ttab"') == "line\nbreak\ttab"


def test_unicode_escapes():
    assert loads(r'"\u00e9"') == "é"
    assert loads(r'"\ud83d\ude00"') == "\U0001F600"


def test_invalid_escape():
    with pytest.raises(JSONDecodeError):
        loads(r'"\x41"')
    with pytest.raises(JSONDecodeError):
        loads(r'"\u12"')


def test_unterminated_string():
    with pytest.raises(JSONDecodeError, match="unterminated"):
        loads('"abc')


def test_control_character_rejected():
    with pytest.raises(JSONDecodeError):
        loads('"a\nb"')


def test_arrays():
    assert loads("[]") == []
    assert loads("[1, 2, [3, [4]]]") == [1, 2, [3, [4]]]
    assert loads(" [ true , null ] ") == [True, None]


def test_objects():
    assert loads("{}") == {}
    assert loads('{"a": 1, "b": [true, {"c": null}]}') == {"a": 1, "b": [True, {"c": None}]}


def test_duplicate_keys_last_wins():
    assert loads('{"a": 1, "a": 2}') == {"a": 2}


def test_trailing_comma_rejected():
    with pytest.raises(JSONDecodeError):
        loads("[1, 2,]")
    with pytest.raises(JSONDecodeError):
        loads('{"a": 1,}')


def test_non_string_key_rejected():
    with pytest.raises(JSONDecodeError, match="string key"):
        loads("{1: 2}")


def test_extra_data():
    with pytest.raises(JSONDecodeError, match="extra data"):
        loads("[1] [2]")


def test_error_position():
    with pytest.raises(JSONDecodeError) as info:
        loads('{\n  "a": tru\n}')
    assert info.value.line == 2
    assert info.value.column == 8


def test_empty_input():
    with pytest.raises(JSONDecodeError, match="end of input"):
        loads("   ")


def test_max_depth():
    assert loads("[[[1]]]", max_depth=3) == [[[1]]]
    with pytest.raises(JSONDecodeError, match="depth"):
        loads("[[[[1]]]]", max_depth=3)


def test_depth_resets_between_siblings():
    assert loads("[[1], [2], [3], [4]]", max_depth=2) == [[1], [2], [3], [4]]


def test_loads_type_check():
    with pytest.raises(TypeError):
        loads(b"[]")
