"""Inferring column types and summarizing numeric columns."""

TRUE_WORDS = {"true", "yes", "y", "1"}
FALSE_WORDS = {"false", "no", "n", "0"}
NULL_WORDS = {"", "na", "n/a", "null", "none"}


def infer_value(text):
    """'' -> None, '12' -> 12, '1.5' -> 1.5, 'true' -> True, else the string."""
    s = text.strip()
    if s.lower() in NULL_WORDS:
        return None
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return text


def infer_column(values):
    """The narrowest type name fitting every non-null value: int < float < bool < str."""
    kind = None
    for v in values:
        x = infer_value(v)
        if x is None:
            continue
        if isinstance(x, bool):
            t = "bool"
        elif isinstance(x, int):
            t = "int"
        elif isinstance(x, float):
            t = "float"
        else:
            return "str"
        if kind is None or kind == t:
            kind = t
        elif {kind, t} == {"int", "float"}:
            kind = "float"
        else:
            return "str"
    return kind or "empty"


def summarize(values):
    """count / nulls / min / max / mean of a numeric column given as strings."""
    numbers = []
    nulls = 0
    for v in values:
        x = infer_value(v)
        if x is None:
            nulls += 1
        elif isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ValueError(f"not a number: {v!r}")
        else:
            numbers.append(x)
    if not numbers:
        return {"count": 0, "nulls": nulls, "min": None, "max": None, "mean": None}
    return {"count": len(numbers), "nulls": nulls, "min": min(numbers), "max": max(numbers),
            "mean": sum(numbers) / len(numbers)}


def parse_bool(text):
    s = text.strip().lower()
    if s in TRUE_WORDS:
        return True
    if s in FALSE_WORDS:
        return False
    raise ValueError(f"not a boolean: {text!r}")
