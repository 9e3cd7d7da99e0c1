import pytest

from textkit.distance import closest, hamming, levenshtein, similarity


def test_levenshtein_identical():
    assert levenshtein("kitten", "kitten") == 0


def test_levenshtein_classic():
    assert levenshtein("kitten", "sitting") == 3


def test_levenshtein_symmetric():
    assert levenshtein("flaw", "lawn") == levenshtein("lawn", "flaw") == 2


def test_levenshtein_empty():
    assert levenshtein("", "abc") == 3
    assert levenshtein("abc", "") == 3


def test_levenshtein_max_distance_cutoff():
    assert levenshtein("abcdef", "uvwxyz", max_distance=2) == 3


def test_levenshtein_max_distance_not_reached():
    assert levenshtein("abcdef", "abcdxf", max_distance=2) == 1


def test_hamming():
    assert hamming("karolin", "kathrin") == 3


def test_hamming_unequal():
    with pytest.raises(ValueError):
        hamming("abc", "ab")


def test_similarity_bounds():
    assert similarity("", "") == 1.0
    assert similarity("abc", "abc") == 1.0
    assert similarity("abc", "xyz") == 0.0


def test_similarity_partial():
    assert similarity("kitten", "sitten") == pytest.approx(5 / 6)


def test_closest_picks_best():
    assert closest("appel", ["apple", "apply", "maple"]) == "apple"


def test_closest_respects_cutoff():
    assert closest("zzz", ["apple", "banana"]) is None
