"""A state-machine CSV reader (RFC 4180 plus a few dialect options)."""


class CSVError(ValueError):
    def __init__(self, message, line):
        super().__init__(f"line {line}: {message}")
        self.line = line


class Dialect:
    def __init__(self, delimiter=",", quotechar='"', skip_blank_lines=True, strip=False,
                 comment=None):
        if len(delimiter) != 1 or len(quotechar) != 1:
            raise ValueError("delimiter and quotechar must be single characters")
        if delimiter == quotechar:
            raise ValueError("delimiter and quotechar must differ")
        self.delimiter = delimiter
        self.quotechar = quotechar
        self.skip_blank_lines = skip_blank_lines
        self.strip = strip
        self.comment = comment


def parse_rows(text, dialect=None):
    """Returns a list of rows (lists of strings). Quoted fields may hold delimiters, doubled
    quotes and newlines."""
    d = dialect or Dialect()
    rows = []
    row = []
    field = []
    in_quotes = False
    was_quoted = False
    line = 1
    row_line = 1
    i = 0
    n = len(text)

    def end_field():
        value = "".join(field)
        if d.strip and not was_quoted:
            value = value.strip()
        row.append(value)

    while i < n:
        ch = text[i]
        if in_quotes:
            if ch == d.quotechar:
                if i + 1 < n and text[i + 1] == d.quotechar:
                    field.append(ch)
                    i += 2
                    continue
                in_quotes = False
                i += 1
                continue
            if ch == "\n":
                line += 1
            field.append(ch)
            i += 1
            continue
        if ch == d.quotechar:
            if field and "".join(field).strip():
                raise CSVError("quote inside an unquoted field", line)
            field = []
            in_quotes = True
            was_quoted = True
            i += 1
            continue
        if ch == d.delimiter:
            end_field()
            field = []
            was_quoted = False
            i += 1
            continue
        if ch == "\r" and i + 1 < n and text[i + 1] == "\n":
            i += 1
            continue
        if ch == "\n":
            end_field()
            _finish_row(rows, row, d, was_quoted)
            row, field, was_quoted = [], [], False
            line += 1
            row_line = line
            i += 1
            continue
        if was_quoted and not ch.isspace():
            raise CSVError("text after a closing quote", line)
        if not was_quoted:
            field.append(ch)
        i += 1
    if in_quotes:
        raise CSVError("unterminated quoted field", row_line)
    if field or row or was_quoted:
        end_field()
        _finish_row(rows, row, d, was_quoted)
    return rows


def _finish_row(rows, row, d, quoted=False):
    if d.skip_blank_lines and row == [""] and not quoted:
        return
    if d.comment is not None and row and row[0].startswith(d.comment):
        return
    rows.append(row)


def read_dicts(text, dialect=None, fieldnames=None, restval=None):
    """Rows as dicts keyed by the header (or ``fieldnames``). Short rows are padded with
    ``restval``; long rows raise CSVError."""
    rows = parse_rows(text, dialect)
    if fieldnames is None:
        if not rows:
            return []
        fieldnames, rows = rows[0], rows[1:]
    if len(set(fieldnames)) != len(fieldnames):
        raise ValueError("duplicate field names")
    out = []
    for number, row in enumerate(rows, start=2):
        if len(row) > len(fieldnames):
            raise CSVError(f"{len(row)} fields, expected {len(fieldnames)}", number)
        record = dict(zip(fieldnames, row))
        for name in fieldnames[len(row):]:
            record[name] = restval
        out.append(record)
    return out
