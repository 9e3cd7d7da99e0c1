"""Closed integer intervals [start, end]."""


def merge_intervals(intervals, touch=True):
    """Merges overlapping intervals; with ``touch``, [1, 2] and [3, 4] merge as well."""
    items = sorted((s, e) for s, e in intervals)
    for s, e in items:
        if s > e:
            raise ValueError(f"interval start {s} is after its end {e}")
    merged = []
    gap = 1 if touch else 0
    for start, end in items:
        if merged and start <= merged[-1][1] + gap:
            if end > merged[-1][1]:
                merged[-1][1] = end
        else:
            merged.append([start, end])
    return [tuple(m) for m in merged]


def total_covered(intervals):
    """Number of integers covered by the union of the intervals."""
    return sum(e - s + 1 for s, e in merge_intervals(intervals))


def insert_interval(intervals, new):
    return merge_intervals(list(intervals) + [new])


def overlaps(a, b):
    return a[0] <= b[1] and b[0] <= a[1]


def intersection(a, b):
    if not overlaps(a, b):
        return None
    return (max(a[0], b[0]), min(a[1], b[1]))
