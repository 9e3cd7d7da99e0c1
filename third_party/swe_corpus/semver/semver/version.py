"""Parsing, ordering and bumping semantic versions."""
import functools
import re

_NUM = r"0|[1-9]\d*"
_IDENT = r"[0-9A-Za-z-]+"
_RE = re.compile(rf"^v?({_NUM})\.({_NUM})\.({_NUM})"
                 rf"(?:-({_IDENT}(?:\.{_IDENT})*))?(?:\+({_IDENT}(?:\.{_IDENT})*))?$")


class VersionError(ValueError):
    pass


def _compare_identifiers(a, b):
    a_num, b_num = a.isdigit(), b.isdigit()
    if a_num and b_num:
        x, y = int(a), int(b)
        return (x > y) - (x < y)
    if a_num != b_num:
        return -1 if a_num else 1
    return (a > b) - (a < b)


@functools.total_ordering
class Version:
    def __init__(self, major, minor=0, patch=0, prerelease=(), build=()):
        for name, value in (("major", major), ("minor", minor), ("patch", patch)):
            if not isinstance(value, int) or value < 0:
                raise VersionError(f"{name} must be a non-negative integer, got {value!r}")
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = tuple(prerelease)
        self.build = tuple(build)
        for ident in self.prerelease:
            if ident.isdigit() and len(ident) > 1 and ident[0] == "0":
                raise VersionError(f"numeric prerelease identifier with a leading zero: {ident}")

    @property
    def release(self):
        return (self.major, self.minor, self.patch)

    def __str__(self):
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            s += "-" + ".".join(self.prerelease)
        if self.build:
            s += "+" + ".".join(self.build)
        return s

    def __repr__(self):
        return f"Version('{self}')"

    def compare(self, other):
        if self.release != other.release:
            return -1 if self.release < other.release else 1
        if self.prerelease == other.prerelease:
            return 0
        if not self.prerelease:
            return 1
        if not other.prerelease:
            return -1
        for a, b in zip(self.prerelease, other.prerelease):
            c = _compare_identifiers(a, b)
            if c:
                return c
        n, m = len(self.prerelease), len(other.prerelease)
        return (n > m) - (n < m)

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.compare(other) < 0

    def __hash__(self):
        return hash((self.release, self.prerelease))

    @property
    def is_prerelease(self):
        return bool(self.prerelease)


def parse(text):
    m = _RE.match(text.strip())
    if not m:
        raise VersionError(f"not a semantic version: {text!r}")
    major, minor, patch, pre, build = m.groups()
    return Version(int(major), int(minor), int(patch), pre.split(".") if pre else (),
                   build.split(".") if build else ())


def bump(version, part, prerelease_tag="rc"):
    """part: 'major', 'minor', 'patch' or 'prerelease'."""
    v = parse(version) if isinstance(version, str) else version
    if part == "major":
        if v.prerelease and v.minor == 0 and v.patch == 0:
            return Version(v.major, 0, 0)
        return Version(v.major + 1, 0, 0)
    if part == "minor":
        if v.prerelease and v.patch == 0:
            return Version(v.major, v.minor, 0)
        return Version(v.major, v.minor + 1, 0)
    if part == "patch":
        if v.prerelease:
            return Version(v.major, v.minor, v.patch)
        return Version(v.major, v.minor, v.patch + 1)
    if part == "prerelease":
        if not v.prerelease:
            return Version(v.major, v.minor, v.patch + 1, (prerelease_tag, "0"))
        pre = list(v.prerelease)
        if pre[-1].isdigit():
            pre[-1] = str(int(pre[-1]) + 1)
        else:
            pre.append("0")
        return Version(v.major, v.minor, v.patch, pre)
    raise VersionError(f"unknown part {part!r}")


def sort_versions(texts, reverse=False):
    return [str(v) for v in sorted((parse(t) for t in texts), reverse=reverse)]
