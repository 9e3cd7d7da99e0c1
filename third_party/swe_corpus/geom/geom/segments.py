"""Line segment intersection."""
from geom.vector import Vec, cross, orientation


def _on_segment(p, a, b):
    return min(a.x, b.x) <= p.x <= max(a.x, b.x) and min(a.y, b.y) <= p.y <= max(a.y, b.y)


def segments_intersect(p1, p2, q1, q2):
    """True if the closed segments p1p2 and q1q2 share a point."""
    o1 = orientation(p1, p2, q1)
    o2 = orientation(p1, p2, q2)
    o3 = orientation(q1, q2, p1)
    o4 = orientation(q1, q2, p2)
    if o1 != o2 and o3 != o4:
        return True
    if o1 == 0 and _on_segment(q1, p1, p2):
        return True
    if o2 == 0 and _on_segment(q2, p1, p2):
        return True
    if o3 == 0 and _on_segment(p1, q1, q2):
        return True
    if o4 == 0 and _on_segment(p2, q1, q2):
        return True
    return False


def segment_intersection(p1, p2, q1, q2):
    """The single intersection point, or None (parallel or disjoint segments)."""
    r = p2 - p1
    s = q2 - q1
    denom = cross(r, s)
    if denom == 0:
        return None
    qp = q1 - p1
    t = cross(qp, s) / denom
    u = cross(qp, r) / denom
    if 0 <= t <= 1 and 0 <= u <= 1:
        return Vec(p1.x + t * r.x, p1.y + t * r.y)
    return None
