import pytest

from semver.ranges import Range, max_satisfying, satisfies


@pytest.mark.parametrize("version,rng,ok", [
    ("1.2.3", ">=1.2.0", True),
    ("1.1.9", ">=1.2.0", False),
    ("1.2.3", ">1.2.3", False),
    ("1.2.3", "<=1.2.3", True),
    ("1.2.3", "=1.2.3", True),
    ("1.2.3", ">=1.0.0 <2.0.0", True),
    ("2.0.0", ">=1.0.0 <2.0.0", False),
])
def test_comparators(version, rng, ok):
    assert satisfies(version, rng) is ok


@pytest.mark.parametrize("version,rng,ok", [
    ("1.9.9", "^1.2.3", True),
    ("2.0.0", "^1.2.3", False),
    ("1.2.2", "^1.2.3", False),
    ("0.2.9", "^0.2.3", True),
    ("0.3.0", "^0.2.3", False),
    ("0.0.3", "^0.0.3", True),
    ("0.0.4", "^0.0.3", False),
    ("1.5.0", "^1", True),
])
def test_caret(version, rng, ok):
    assert satisfies(version, rng) is ok


@pytest.mark.parametrize("version,rng,ok", [
    ("1.2.9", "~1.2.3", True),
    ("1.3.0", "~1.2.3", False),
    ("1.9.0", "~1", True),
    ("2.0.0", "~1", False),
])
def test_tilde(version, rng, ok):
    assert satisfies(version, rng) is ok


def test_x_ranges():
    assert satisfies("1.4.2", "1.x")
    assert not satisfies("2.0.0", "1.x")
    assert satisfies("1.2.7", "1.2.*")
    assert not satisfies("1.3.0", "1.2")
    assert satisfies("3.0.0", "*")
    assert satisfies("3.0.0", "")


def test_hyphen_ranges():
    assert satisfies("1.5.0", "1.2.3 - 2.3.4")
    assert satisfies("2.3.4", "1.2.3 - 2.3.4")
    assert not satisfies("2.3.5", "1.2.3 - 2.3.4")
    assert satisfies("2.3.9", "1.2.3 - 2.3")
    assert not satisfies("2.4.0", "1.2.3 - 2.3")
    assert satisfies("2.9.0", "1 - 2")


def test_or_ranges():
    r = Range("<1.0.0 || >=2.0.0")
    assert r.test("0.5.0")
    assert not r.test("1.5.0")
    assert r.test("2.1.0")


def test_partial_comparators():
    assert satisfies("1.3.0", ">=1.3")
    assert not satisfies("1.2.9", ">=1.3")


def test_prereleases_excluded_by_default():
    assert not satisfies("1.3.0-rc.1", ">=1.2.0")
    assert satisfies("1.3.0-rc.1", ">=1.2.0", include_prerelease=True)
    assert satisfies("1.3.0-rc.2", ">=1.3.0-rc.1")
    assert not satisfies("1.4.0-rc.1", ">=1.3.0-rc.1")


def test_max_satisfying():
    versions = ["1.0.0", "1.2.0", "1.2.5", "2.0.0", "2.1.0-rc.1"]
    assert max_satisfying(versions, "^1.0.0") == "1.2.5"
    assert max_satisfying(versions, ">=2.0.0") == "2.0.0"
    assert max_satisfying(versions, "^3") is None
