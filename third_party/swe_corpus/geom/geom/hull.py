"""Convex hull by Andrew's monotone chain."""
from geom.vector import Vec, cross


def convex_hull(points, keep_collinear=False):
    """Hull vertices in counter-clockwise order starting from the lowest-leftmost point."""
    pts = sorted(set((p.x, p.y) for p in points))
    pts = [Vec(x, y) for x, y in pts]
    if len(pts) <= 2:
        return pts

    def turn(o, a, b):
        return cross(a - o, b - o)

    def build(seq):
        chain = []
        for p in seq:
            while len(chain) >= 2:
                t = turn(chain[-2], chain[-1], p)
                if t < 0 or (t == 0 and not keep_collinear):
                    chain.pop()
                else:
                    break
            chain.append(p)
        return chain

    lower = build(pts)
    upper = build(reversed(pts))
    hull = lower[:-1] + upper[:-1]
    start = min(range(len(hull)), key=lambda i: (hull[i].y, hull[i].x))
    return hull[start:] + hull[:start]


def diameter(points):
    """Largest distance between two of the points (brute force over the hull)."""
    hull = convex_hull(points)
    best = 0.0
    for i in range(len(hull)):
        for j in range(i + 1, len(hull)):
            best = max(best, (hull[i] - hull[j]).length())
    return best
