import pytest

from csvlite.reader import CSVError, Dialect, parse_rows, read_dicts


def test_simple_rows():
    assert parse_rows("a,b,c\n1,2,3\n") == [["a", "b", "c"], ["1", "2", "3"]]


def test_no_trailing_newline():
    assert parse_rows("a,b\n1,2") == [["a", "b"], ["1", "2"]]


def test_empty_fields():
    assert parse_rows(",a,,\n") == [["", "a", "", ""]]


def test_crlf():
    assert parse_rows("a,b\r\n1,2\r\n") == [["a", "b"], ["1", "2"]]


def test_quoted_delimiter_and_quotes():
    assert parse_rows('"a,b","say ""hi"""\n') == [["a,b", 'say "hi"']]


def test_quoted_newline():
    assert parse_rows('id,text\n1,"line one\nline two"\n') == [
        ["id", "text"], ["1", "line one\nline two"]]


def test_quoted_empty_field_kept():
    assert parse_rows('""\n') == [[""]]


def test_blank_lines_skipped():
    assert parse_rows("a\n\nb\n") == [["a"], ["b"]]


def test_blank_lines_kept():
    assert parse_rows("a\n\nb\n", Dialect(skip_blank_lines=False)) == [["a"], [""], ["b"]]


def test_custom_delimiter_and_quote():
    d = Dialect(delimiter=";", quotechar="'")
    assert parse_rows("x;'a;b'\n", d) == [["x", "a;b"]]


def test_strip_unquoted_only():
    d = Dialect(strip=True)
    assert parse_rows(' a , " b " \n', d) == [["a", " b "]]


def test_comment_lines():
    assert parse_rows("# header\na,b\n", Dialect(comment="#")) == [["a", "b"]]


def test_unterminated_quote():
    with pytest.raises(CSVError) as info:
        parse_rows('a\n"open,1\n2\n')
    assert info.value.line == 2


def test_quote_inside_unquoted_field():
    with pytest.raises(CSVError):
        parse_rows('ab"c"\n')


def test_text_after_closing_quote():
    with pytest.raises(CSVError):
        parse_rows('"a"b\n')


def test_dialect_validation():
    with pytest.raises(ValueError):
        Dialect(delimiter=",,")
    with pytest.raises(ValueError):
        Dialect(delimiter='"')


def test_read_dicts():
    text = "name,age\nann,31\nbob,27\n"
    assert read_dicts(text) == [{"name": "ann", "age": "31"}, {"name": "bob", "age": "27"}]


def test_read_dicts_short_row_padded():
    assert read_dicts("a,b,c\n1\n", restval="-") == [{"a": "1", "b": "-", "c": "-"}]


def test_read_dicts_long_row():
    with pytest.raises(CSVError) as info:
        read_dicts("a,b\n1,2\n1,2,3\n")
    assert info.value.line == 3


def test_read_dicts_fieldnames_given():
    assert read_dicts("1,2\n", fieldnames=["x", "y"]) == [{"x": "1", "y": "2"}]


def test_read_dicts_empty_and_duplicates():
    assert read_dicts("") == []
    with pytest.raises(ValueError):
        read_dicts("a,a\n1,2\n")
