import pytest

from textkit.wrap import center, columns, dedent, indent_lines, wrap


def test_wrap_basic():
    assert wrap("the quick brown fox jumps over the lazy dog", width=10) == [
        "the quick", "brown fox", "jumps over", "the lazy", "dog"]


def test_wrap_exact_width():
    assert wrap("aaaa bbbb", width=9) == ["aaaa bbbb"]


def test_wrap_long_word_broken():
    assert wrap("abcdefghij xy", width=4) == ["abcd", "efgh", "ij", "xy"]


def test_wrap_long_word_kept():
    assert wrap("abcdefghij xy", width=4, break_long_words=False) == ["abcdefghij", "xy"]


def test_wrap_invalid_width():
    with pytest.raises(ValueError):
        wrap("abc", width=0)


def test_center_even_and_odd():
    assert center("ab", 6) == "  ab  "
    assert center("ab", 5, fill="*") == "*ab**"


def test_center_too_wide():
    assert center("abcdef", 3) == "abcdef"


def test_indent_lines_skips_blank():
    assert indent_lines("a\n\nb", prefix="> ") == "> a\n\n> b"


def test_indent_lines_all():
    assert indent_lines("a\n\nb", prefix="> ", skip_blank=False) == "> a\n> \n> b"


def test_dedent():
    assert dedent("    a\n      b\n\n    c") == "a\n  b\n\nc"


def test_columns():
    assert columns([["name", "qty"], ["apple", "3"], ["kiwi", "12"]]) == [
        "name   qty", "apple  3", "kiwi   12"]


def test_columns_empty():
    assert columns([]) == []
