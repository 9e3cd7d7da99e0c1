import pytest

from textkit.case import camel_to_snake, snake_to_camel, swap_case_words, title_case


@pytest.mark.parametrize("name,expected", [
    ("parseHttpResponse", "parse_http_response"),
    ("parseHTTPResponse", "parse_http_response"),
    ("HTTPServer", "http_server"),
    ("simple", "simple"),
    ("version2Update", "version2_update"),
])
def test_camel_to_snake(name, expected):
    assert camel_to_snake(name) == expected


def test_snake_to_camel():
    assert snake_to_camel("parse_http_response") == "parseHttpResponse"


def test_snake_to_camel_upper_first():
    assert snake_to_camel("parse_http_response", upper_first=True) == "ParseHttpResponse"


def test_snake_to_camel_ignores_extra_underscores():
    assert snake_to_camel("__private__name_") == "privateName"


def test_snake_to_camel_empty():
    assert snake_to_camel("___") == ""


def test_title_case_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_title_case_last_word_capitalised():
    assert title_case("what are you looking at") == "What Are You Looking At"


def test_title_case_keeps_acronyms():
    assert title_case("a guide to NASA and the ESA") == "A Guide to NASA and the ESA"


def test_swap_case_words():
    assert swap_case_words("make this word louder") == "MAKE THIS WORD LOUDER"
    assert swap_case_words("a big DOG runs", min_length=4) == "a big dog RUNS"
