import pytest

from geom.hull import convex_hull, diameter
from geom.polygon import (area, bounding_box, centroid, is_convex, perimeter, point_in_polygon,
                          signed_area)
from geom.segments import segment_intersection, segments_intersect
from geom.vector import Vec

SQUARE = [Vec(0, 0), Vec(4, 0), Vec(4, 4), Vec(0, 4)]
L_SHAPE = [Vec(0, 0), Vec(4, 0), Vec(4, 1), Vec(1, 1), Vec(1, 4), Vec(0, 4)]


def test_area_and_orientation():
    assert area(SQUARE) == 16
    assert signed_area(SQUARE) == 16
    assert signed_area(list(reversed(SQUARE))) == -16
    assert area(L_SHAPE) == 7
    assert area([Vec(0, 0), Vec(1, 1)]) == 0


def test_perimeter():
    assert perimeter(SQUARE) == 16
    assert perimeter([Vec(0, 0), Vec(3, 0), Vec(3, 4)]) == 12
    assert perimeter([Vec(1, 1)]) == 0.0


def test_centroid():
    assert centroid(SQUARE) == Vec(2, 2)
    c = centroid([Vec(0, 0), Vec(6, 0), Vec(0, 3)])
    assert (c.x, c.y) == pytest.approx((2, 1))
    with pytest.raises(ValueError):
        centroid([Vec(0, 0), Vec(1, 1), Vec(2, 2)])


def test_point_in_polygon():
    assert point_in_polygon(Vec(2, 2), SQUARE)
    assert not point_in_polygon(Vec(5, 2), SQUARE)
    assert point_in_polygon(Vec(0.5, 3), L_SHAPE)
    assert not point_in_polygon(Vec(3, 3), L_SHAPE)


def test_point_on_boundary():
    assert point_in_polygon(Vec(4, 2), SQUARE) is True
    assert point_in_polygon(Vec(4, 2), SQUARE, include_boundary=False) is False
    assert point_in_polygon(Vec(0, 0), SQUARE, include_boundary=False) is False


def test_is_convex():
    assert is_convex(SQUARE)
    assert not is_convex(L_SHAPE)
    assert is_convex([Vec(0, 0), Vec(2, 0), Vec(4, 0), Vec(2, 2)])
    assert not is_convex([Vec(0, 0), Vec(1, 1)])
    assert not is_convex([Vec(0, 0), Vec(1, 1), Vec(2, 2)])


def test_bounding_box():
    assert bounding_box(L_SHAPE) == (Vec(0, 0), Vec(4, 4))
    with pytest.raises(ValueError):
        bounding_box([])


def test_convex_hull_square_with_interior():
    pts = SQUARE + [Vec(1, 1), Vec(2, 3), Vec(2, 0)]
    assert convex_hull(pts) == [Vec(0, 0), Vec(4, 0), Vec(4, 4), Vec(0, 4)]


def test_convex_hull_keep_collinear():
    pts = SQUARE + [Vec(2, 0)]
    assert convex_hull(pts, keep_collinear=True) == [Vec(0, 0), Vec(2, 0), Vec(4, 0), Vec(4, 4),
                                                     Vec(0, 4)]


def test_convex_hull_small_inputs():
    assert convex_hull([]) == []
    assert convex_hull([Vec(1, 1), Vec(1, 1)]) == [Vec(1, 1)]
    assert convex_hull([Vec(2, 2), Vec(0, 0)]) == [Vec(0, 0), Vec(2, 2)]


def test_convex_hull_starts_lowest():
    pts = [Vec(1, 5), Vec(3, 0), Vec(5, 5), Vec(0, 2)]
    assert convex_hull(pts)[0] == Vec(3, 0)


def test_diameter():
    assert diameter(SQUARE) == pytest.approx(32 ** 0.5)


def test_segments_intersect():
    assert segments_intersect(Vec(0, 0), Vec(4, 4), Vec(0, 4), Vec(4, 0))
    assert not segments_intersect(Vec(0, 0), Vec(1, 1), Vec(2, 2), Vec(3, 0))
    assert segments_intersect(Vec(0, 0), Vec(2, 0), Vec(2, 0), Vec(3, 5))
    assert segments_intersect(Vec(0, 0), Vec(4, 0), Vec(1, 0), Vec(2, 0))
    assert not segments_intersect(Vec(0, 0), Vec(1, 0), Vec(2, 0), Vec(3, 0))


def test_segment_intersection_point():
    assert segment_intersection(Vec(0, 0), Vec(4, 4), Vec(0, 4), Vec(4, 0)) == Vec(2, 2)
    assert segment_intersection(Vec(0, 0), Vec(1, 0), Vec(0, 1), Vec(1, 1)) is None
    assert segment_intersection(Vec(0, 0), Vec(1, 1), Vec(3, 0), Vec(3, 5)) is None
