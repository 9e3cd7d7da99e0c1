"""Simple polygons given as lists of Vec vertices."""
from geom.vector import Vec, cross, distance, orientation


def signed_area(poly):
    """Shoelace formula: positive for counter-clockwise vertex order."""
    n = len(poly)
    if n < 3:
        return 0
    total = 0
    for i in range(n):
        total += cross(poly[i], poly[(i + 1) % n])
    return total / 2


def area(poly):
    return abs(signed_area(poly))


def perimeter(poly):
    n = len(poly)
    if n < 2:
        return 0.0
    return sum(distance(poly[i], poly[(i + 1) % n]) for i in range(n))


def centroid(poly):
    a = signed_area(poly)
    if a == 0:
        raise ValueError("degenerate polygon has no centroid")
    cx = cy = 0
    n = len(poly)
    for i in range(n):
        p, q = poly[i], poly[(i + 1) % n]
        c = cross(p, q)
        cx += (p.x + q.x) * c
        cy += (p.y + q.y) * c
    return Vec(cx / (6 * a), cy / (6 * a))


def on_segment(p, a, b):
    """True if p lies on the closed segment ab."""
    if orientation(a, b, p) != 0:
        return False
    return min(a.x, b.x) <= p.x <= max(a.x, b.x) and min(a.y, b.y) <= p.y <= max(a.y, b.y)


def point_in_polygon(p, poly, include_boundary=True):
    """Ray casting to the right; points on an edge count as inside if ``include_boundary``."""
    n = len(poly)
    for i in range(n):
        if on_segment(p, poly[i], poly[(i + 1) % n]):
            return include_boundary
    inside = False
    for i in range(n):
        a, b = poly[i], poly[(i + 1) % n]
        if (a.y > p.y) != (b.y > p.y):
            x_cross = a.x + (p.y - a.y) * (b.x - a.x) / (b.y - a.y)
            if p.x < x_cross:
                inside = not inside
    return inside


def is_convex(poly):
    """True for a convex polygon (collinear vertices allowed)."""
    n = len(poly)
    if n < 3:
        return False
    sign = 0
    for i in range(n):
        o = orientation(poly[i], poly[(i + 1) % n], poly[(i + 2) % n])
        if o == 0:
            continue
        if sign == 0:
            sign = o
        elif o != sign:
            return False
    return sign != 0


def bounding_box(points):
    if not points:
        raise ValueError("no points")
    xs = [p.x for p in points]
    ys = [p.y for p in points]
    return Vec(min(xs), min(ys)), Vec(max(xs), max(ys))
