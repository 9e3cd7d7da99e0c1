import math

import pytest

from geom.vector import Vec, angle_between, cross, distance, dot, lerp, orientation


def test_arithmetic():
    assert Vec(1, 2) + Vec(3, 4) == Vec(4, 6)
    assert Vec(1, 2) - Vec(3, 5) == Vec(-2, -3)
    assert Vec(1, 2) * 3 == Vec(3, 6)
    assert 2 * Vec(1, 2) == Vec(2, 4)
    assert -Vec(1, -2) == Vec(-1, 2)


def test_dot_cross():
    assert dot(Vec(1, 2), Vec(3, 4)) == 11
    assert cross(Vec(1, 0), Vec(0, 1)) == 1
    assert cross(Vec(0, 1), Vec(1, 0)) == -1


def test_length_and_normalized():
    assert Vec(3, 4).length() == 5
    n = Vec(3, 4).normalized()
    assert (n.x, n.y) == pytest.approx((0.6, 0.8))
    with pytest.raises(ValueError):
        Vec(0, 0).normalized()


def test_rotated_and_perpendicular():
    r = Vec(1, 0).rotated(90)
    assert (r.x, r.y) == pytest.approx((0, 1))
    assert Vec(2, 3).perpendicular() == Vec(-3, 2)


def test_orientation():
    assert orientation(Vec(0, 0), Vec(1, 0), Vec(1, 1)) == 1
    assert orientation(Vec(0, 0), Vec(1, 0), Vec(1, -1)) == -1
    assert orientation(Vec(0, 0), Vec(1, 1), Vec(2, 2)) == 0


def test_angle_between():
    assert angle_between(Vec(1, 0), Vec(0, 5)) == pytest.approx(90)
    assert angle_between(Vec(1, 0), Vec(-1, 0)) == pytest.approx(180)
    assert angle_between(Vec(1, 1), Vec(2, 2)) == pytest.approx(0, abs=1e-5)
    with pytest.raises(ValueError):
        angle_between(Vec(0, 0), Vec(1, 0))


def test_distance_and_lerp():
    assert distance(Vec(0, 0), Vec(6, 8)) == 10
    assert lerp(Vec(0, 0), Vec(10, 20), 0.25) == Vec(2.5, 5.0)


def test_hash_and_iter():
    assert len({Vec(1, 2), Vec(1, 2), Vec(2, 1)}) == 2
    assert tuple(Vec(5, 6)) == (5, 6)
    assert math.isclose(Vec(1, 1).length(), math.sqrt(2))
