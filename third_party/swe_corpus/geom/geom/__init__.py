"""geom: plane geometry with exact integer arithmetic where possible."""
from geom.polygon import area, centroid, is_convex, perimeter, point_in_polygon
from geom.hull import convex_hull
from geom.segments import segment_intersection, segments_intersect
from geom.vector import Vec, angle_between, cross, dot

__all__ = ["area", "centroid", "is_convex", "perimeter", "point_in_polygon", "convex_hull",
           "segment_intersection", "segments_intersect", "Vec", "angle_between", "cross", "dot"]
