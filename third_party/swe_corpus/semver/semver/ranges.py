"""npm-style ranges: comparators, caret, tilde, x-ranges, hyphens and '||'."""
from semver.version import Version, VersionError, parse

_OPS = (">=", "<=", ">", "<", "=")


def _partial(text):
    """'1', '1.2', '1.x', '1.2.*' -> (major, minor or None, patch or None)."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 3:
        raise VersionError(f"bad partial version {text!r}")
    nums = []
    for p in parts:
        if p in ("x", "X", "*"):
            break
        if not p.isdigit():
            raise VersionError(f"bad partial version {text!r}")
        nums.append(int(p))
    nums += [None] * (3 - len(nums))
    return tuple(nums)


def _bound(text):
    """A full version, or a partial one padded with zeros."""
    try:
        return parse(text)
    except VersionError:
        return Version(*[x or 0 for x in _partial(text)])


def _caret(text):
    major, minor, patch = _partial(text)
    lo = Version(major, minor or 0, patch or 0)
    if major > 0 or minor is None:
        hi = Version(major + 1, 0, 0)
    elif minor > 0 or patch is None:
        hi = Version(0, minor + 1, 0)
    else:
        hi = Version(0, 0, patch + 1)
    return [(">=", lo), ("<", hi)]


def _tilde(text):
    major, minor, patch = _partial(text)
    lo = Version(major, minor or 0, patch or 0)
    if minor is None:
        hi = Version(major + 1, 0, 0)
    else:
        hi = Version(major, minor + 1, 0)
    return [(">=", lo), ("<", hi)]


def _xrange(text):
    major, minor, patch = _partial(text)
    if major is None:
        return []
    if minor is None:
        return [(">=", Version(major, 0, 0)), ("<", Version(major + 1, 0, 0))]
    if patch is None:
        return [(">=", Version(major, minor, 0)), ("<", Version(major, minor + 1, 0))]
    return [("=", Version(major, minor, patch))]


def _comparators(part):
    part = part.strip()
    if part in ("", "*", "x", "X"):
        return []
    if " - " in part:
        lo_text, hi_text = (s.strip() for s in part.split(" - ", 1))
        lo = _partial(lo_text)
        hi = _partial(hi_text)
        out = [(">=", Version(lo[0], lo[1] or 0, lo[2] or 0))]
        if hi[1] is None:
            out.append(("<", Version(hi[0] + 1, 0, 0)))
        elif hi[2] is None:
            out.append(("<", Version(hi[0], hi[1] + 1, 0)))
        else:
            out.append(("<=", Version(*hi)))
        return out
    out = []
    for token in part.split():
        if token.startswith("^"):
            out += _caret(token[1:])
        elif token.startswith("~"):
            out += _tilde(token[1:])
        else:
            for op in _OPS:
                if token.startswith(op):
                    rest = token[len(op):]
                    out.append((op, _bound(rest)))
                    break
            else:
                out += _xrange(token)
    return out


def _test(op, v, bound):
    if op == ">=":
        return v >= bound
    if op == "<=":
        return v <= bound
    if op == ">":
        return v > bound
    if op == "<":
        return v < bound
    return v == bound


class Range:
    def __init__(self, text):
        self.text = text
        self.sets = [_comparators(alt) for alt in text.split("||")]

    def __repr__(self):
        return f"Range({self.text!r})"

    def test(self, version, include_prerelease=False):
        v = parse(version) if isinstance(version, str) else version
        for comparators in self.sets:
            if all(_test(op, v, bound) for op, bound in comparators):
                if v.prerelease and not include_prerelease:
                    # a prerelease only matches a comparator on the same release tuple
                    if not any(b.prerelease and b.release == v.release
                               for _, b in comparators):
                        continue
                return True
        return False


def satisfies(version, range_text, include_prerelease=False):
    return Range(range_text).test(version, include_prerelease)


def max_satisfying(versions, range_text):
    r = Range(range_text)
    matching = [parse(v) for v in versions if r.test(v)]
    return str(max(matching)) if matching else None
