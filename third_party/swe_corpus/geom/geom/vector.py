"""2-D vectors."""
import math


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __iter__(self):
        yield self.x
        yield self.y

    def __eq__(self, other):
        return isinstance(other, Vec) and self.x == other.x and self.y == other.y

    def __hash__(self):
        return hash((self.x, self.y))

    def __repr__(self):
        return f"Vec({self.x!r}, {self.y!r})"

    def __add__(self, other):
        return Vec(self.x + other.x, self.y + other.y)

    def __sub__(self, other):
        return Vec(self.x - other.x, self.y - other.y)

    def __mul__(self, k):
        return Vec(self.x * k, self.y * k)

    __rmul__ = __mul__

    def __neg__(self):
        return Vec(-self.x, -self.y)

    def length(self):
        return math.hypot(self.x, self.y)

    def normalized(self):
        n = self.length()
        if n == 0:
            raise ValueError("cannot normalize the zero vector")
        return Vec(self.x / n, self.y / n)

    def rotated(self, degrees):
        r = math.radians(degrees)
        c, s = math.cos(r), math.sin(r)
        return Vec(self.x * c - self.y * s, self.x * s + self.y * c)

    def perpendicular(self):
        """Rotated by +90 degrees."""
        return Vec(-self.y, self.x)


def dot(a, b):
    return a.x * b.x + a.y * b.y


def cross(a, b):
    """z component of a x b: positive when b is counter-clockwise from a."""
    return a.x * b.y - a.y * b.x


def orientation(p, q, r):
    """1 counter-clockwise, -1 clockwise, 0 collinear."""
    c = cross(q - p, r - p)
    if c > 0:
        return 1
    if c < 0:
        return -1
    return 0


def angle_between(a, b):
    """Unsigned angle in degrees, 0..180."""
    na, nb = a.length(), b.length()
    if na == 0 or nb == 0:
        raise ValueError("angle with a zero vector")
    cos = max(-1.0, min(1.0, dot(a, b) / (na * nb)))
    return math.degrees(math.acos(cos))


def distance(p, q):
    return (p - q).length()


def lerp(p, q, t):
    return Vec(p.x + (q.x - p.x) * t, p.y + (q.y - p.y) * t)
