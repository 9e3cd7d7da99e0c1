import pytest

from csvlite.reader import Dialect, parse_rows
from csvlite.types import infer_column, infer_value, parse_bool, summarize
from csvlite.writer import format_row, write_dicts, write_rows


def test_format_plain():
    assert format_row(["a", 1, 2.5, None]) == "a,1,2.5,"


def test_format_quotes_when_needed():
    assert format_row(["a,b", 'x"y', "line\nbreak", " pad"]) == \
        '"a,b","x""y","line\nbreak"," pad"'


def test_format_quote_all():
    assert format_row(["a", ""], quote_all=True) == '"a",""'


def test_write_rows_custom_dialect():
    d = Dialect(delimiter="\t")
    assert write_rows([["a", "b c"], ["1", "2"]], d) == "a\tb c\n1\t2\n"


def test_round_trip():
    rows = [["id", "note"], ["1", 'he said "ok", then left'], ["2", "multi\nline"], ["3", ""]]
    assert parse_rows(write_rows(rows)) == rows


def test_write_dicts():
    recs = [{"a": 1, "b": 2}, {"b": 3, "c": 4}]
    assert write_dicts(recs) == "a,b,c\n1,2,\n,3,4\n"


def test_write_dicts_unknown_field():
    with pytest.raises(ValueError):
        write_dicts([{"a": 1, "z": 2}], fieldnames=["a"])


@pytest.mark.parametrize("text,value", [("", None), ("NA", None), ("12", 12), ("-3", -3),
                                        ("1.5", 1.5), ("true", True), ("False", False),
                                        ("abc", "abc")])
def test_infer_value(text, value):
    assert infer_value(text) == value and type(infer_value(text)) is type(value)


def test_infer_column():
    assert infer_column(["1", "2", ""]) == "int"
    assert infer_column(["1", "2.5"]) == "float"
    assert infer_column(["true", "false", "n/a"]) == "bool"
    assert infer_column(["1", "x"]) == "str"
    assert infer_column(["1", "true"]) == "str"
    assert infer_column(["", "NA"]) == "empty"


def test_summarize():
    s = summarize(["3", "", "1", "2"])
    assert s == {"count": 3, "nulls": 1, "min": 1, "max": 3, "mean": 2.0}


def test_summarize_empty_and_bad():
    assert summarize(["", ""])["count"] == 0
    with pytest.raises(ValueError):
        summarize(["1", "abc"])


def test_parse_bool():
    assert parse_bool(" Yes ") is True
    assert parse_bool("0") is False
    with pytest.raises(ValueError):
        parse_bool("maybe")
