import pytest

from semver.version import Version, VersionError, bump, parse, sort_versions


def test_parse_full():
    v = parse("1.2.3-alpha.1+build.5")
    assert v.release == (1, 2, 3)
    assert v.prerelease == ("alpha", "1")
    assert v.build == ("build", "5")
    assert str(v) == "1.2.3-alpha.1+build.5"


def test_parse_v_prefix_and_spaces():
    assert str(parse(" v2.0.10 ")) == "2.0.10"


@pytest.mark.parametrize("text", ["1.2", "1.2.3.4", "01.2.3", "1.2.3-", "a.b.c", "1.2.3+"])
def test_parse_invalid(text):
    with pytest.raises(VersionError):
        parse(text)


def test_leading_zero_prerelease_rejected():
    with pytest.raises(VersionError):
        parse("1.0.0-01")


def test_negative_component_rejected():
    with pytest.raises(VersionError):
        Version(1, -1, 0)


def test_ordering_release():
    assert parse("1.2.3") < parse("1.2.4") < parse("1.3.0") < parse("2.0.0")
    assert parse("1.10.0") > parse("1.9.0")


def test_prerelease_lower_than_release():
    assert parse("1.0.0-alpha") < parse("1.0.0")
    assert parse("1.0.0") > parse("1.0.0-rc.1")


def test_spec_precedence_chain():
    chain = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
             "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    versions = [parse(t) for t in chain]
    for a, b in zip(versions, versions[1:]):
        assert a < b


def test_build_metadata_ignored():
    assert parse("1.0.0+a") == parse("1.0.0+b")
    assert len({parse("1.0.0+a"), parse("1.0.0")}) == 1


def test_sort_versions():
    assert sort_versions(["1.0.0", "0.9.1", "1.0.0-rc.1", "0.10.0"]) == [
        "0.9.1", "0.10.0", "1.0.0-rc.1", "1.0.0"]
    assert sort_versions(["1.0.0", "2.0.0"], reverse=True) == ["2.0.0", "1.0.0"]


def test_bump_release_parts():
    assert str(bump("1.2.3", "major")) == "2.0.0"
    assert str(bump("1.2.3", "minor")) == "1.3.0"
    assert str(bump("1.2.3", "patch")) == "1.2.4"


def test_bump_from_prerelease():
    assert str(bump("2.0.0-rc.1", "major")) == "2.0.0"
    assert str(bump("1.3.0-rc.1", "minor")) == "1.3.0"
    assert str(bump("1.2.4-rc.1", "patch")) == "1.2.4"
    assert str(bump("1.2.4-rc.1", "minor")) == "1.3.0"


def test_bump_prerelease():
    assert str(bump("1.2.3", "prerelease")) == "1.2.4-rc.0"
    assert str(bump("1.2.4-rc.0", "prerelease")) == "1.2.4-rc.1"
    assert str(bump("1.2.4-beta", "prerelease")) == "1.2.4-beta.0"
    assert str(bump("1.2.3", "prerelease", prerelease_tag="dev")) == "1.2.4-dev.0"


def test_bump_unknown_part():
    with pytest.raises(VersionError):
        bump("1.0.0", "micro")
