"""Writing rows with minimal quoting."""
from csvlite.reader import Dialect


def needs_quotes(value, d):
    if value == "":
        return False
    return (d.delimiter in value or d.quotechar in value or "\n" in value or "\r" in value
            or value[0].isspace() or value[-1].isspace())


def format_field(value, d, quote_all=False):
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if quote_all or needs_quotes(text, d):
        return d.quotechar + text.replace(d.quotechar, d.quotechar * 2) + d.quotechar
    return text


def format_row(row, dialect=None, quote_all=False):
    d = dialect or Dialect()
    return d.delimiter.join(format_field(v, d, quote_all) for v in row)


def write_rows(rows, dialect=None, quote_all=False, line_end="\n"):
    return "".join(format_row(r, dialect, quote_all) + line_end for r in rows)


def write_dicts(records, fieldnames=None, dialect=None, missing=""):
    """Header line plus one line per record. Unknown keys raise ValueError."""
    if fieldnames is None:
        fieldnames = []
        for rec in records:
            for key in rec:
                if key not in fieldnames:
                    fieldnames.append(key)
    rows = [list(fieldnames)]
    for rec in records:
        extra = set(rec) - set(fieldnames)
        if extra:
            raise ValueError(f"unknown fields: {sorted(extra)}")
        rows.append([rec.get(f, missing) for f in fieldnames])
    return write_rows(rows, dialect)
