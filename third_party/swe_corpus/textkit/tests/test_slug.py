import pytest

from textkit.slug import count_words, initials, slugify, strip_accents, truncate


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_collapses_separators():
    assert slugify("  many   spaces -- and__underscores ") == "many-spaces-and-underscores"


def test_slugify_accents():
    assert slugify("Crème Brûlée à la carte") == "creme-brulee-a-la-carte"


def test_slugify_custom_separator():
    assert slugify("Python is fun", sep="_") == "python_is_fun"


def test_slugify_keeps_case_when_asked():
    assert slugify("Keep The Case", lowercase=False) == "Keep-The-Case"


def test_slugify_max_length_cuts_at_word_boundary():
    assert slugify("the quick brown fox", max_length=12) == "the-quick"


def test_slugify_max_length_exact_fit():
    assert slugify("the quick brown fox", max_length=15) == "the-quick-brown"


def test_slugify_max_length_single_long_word():
    assert slugify("supercalifragilistic", max_length=5) == "super"


def test_slugify_rejects_non_strings():
    with pytest.raises(TypeError):
        slugify(42)


def test_strip_accents():
    assert strip_accents("naïve café") == "naive cafe"


def test_truncate_short_text_untouched():
    assert truncate("short", 10) == "short"


def test_truncate_exact_width_untouched():
    assert truncate("abcdef", 6) == "abcdef"


def test_truncate_adds_ellipsis():
    assert truncate("abcdefghij", 8) == "abcde..."


def test_truncate_whole_words():
    assert truncate("the quick brown fox", 13, whole_words=True) == "the quick..."


def test_truncate_tiny_width():
    assert truncate("abcdef", 2) == ".."


def test_truncate_negative_width():
    with pytest.raises(ValueError):
        truncate("abc", -1)


def test_count_words():
    assert count_words("  one two\tthree\nfour ") == 4


def test_initials():
    assert initials("ada lovelace king byron") == "ALK"
    assert initials("grace hopper", max_letters=1) == "G"
