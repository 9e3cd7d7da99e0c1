"""csvlite: CSV parsing and writing with a small dialect and type inference."""
from csvlite.reader import CSVError, Dialect, parse_rows, read_dicts
from csvlite.types import infer_column, infer_value, summarize
from csvlite.writer import format_row, write_dicts, write_rows

__all__ = ["CSVError", "Dialect", "parse_rows", "read_dicts", "infer_column", "infer_value",
           "summarize", "format_row", "write_dicts", "write_rows"]
