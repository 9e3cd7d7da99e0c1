"""String distances."""


def levenshtein(a, b, max_distance=None):
    """Edit distance (insertions, deletions, substitutions cost 1).

    With ``max_distance``, returns ``max_distance + 1`` as soon as the distance must exceed it.
    """
    if a == b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            insert = current[j - 1] + 1
            delete = previous[j] + 1
            replace = previous[j - 1] + (ca != cb)
            current.append(min(insert, delete, replace))
        if max_distance is not None and min(current) > max_distance:
            return max_distance + 1
        previous = current
    return previous[-1]


def hamming(a, b):
    """Number of differing positions; the strings must have equal length."""
    if len(a) != len(b):
        raise ValueError("hamming distance needs strings of equal length")
    return sum(1 for x, y in zip(a, b) if x != y)


def similarity(a, b):
    """1 - levenshtein / max(len): 1.0 for equal strings, 0.0 for completely different ones."""
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1.0 - levenshtein(a, b) / longest


def closest(word, candidates, cutoff=0.6):
    """The candidate most similar to ``word`` with similarity >= cutoff (ties: first), or None."""
    best, best_score = None, cutoff
    for cand in candidates:
        score = similarity(word, cand)
        if score > best_score or (best is None and score >= cutoff):
            best, best_score = cand, score
    return best
