"""semver: semantic versioning 2.0.0 with npm-style ranges."""
from semver.ranges import Range, max_satisfying, satisfies
from semver.version import Version, VersionError, bump, parse

__all__ = ["Range", "max_satisfying", "satisfies", "Version", "VersionError", "bump", "parse"]
