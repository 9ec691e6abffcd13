"""A row filter: a small, safe predicate language over one table's column values (Flink CDC's
transform ``filter``, Debezium's snapshot select overrides), evaluated in Python on the values the
pipeline normalises (records/values.py), the same on the snapshot's rows and the binlog's images.

The language is a subset of SQL's ``WHERE``, with SQL's NULL logic (a comparison with NULL is
unknown; a row is kept only when the predicate is true)::

    status IN ('paid', 'shipped') AND amount >= 10.5
    NOT (country = 'DE' OR deleted_at IS NOT NULL)
    created BETWEEN '2024-01-01' AND '2024-12-31 23:59:59' AND `order id` <> 7 AND name LIKE 'A%'

- operands: column names (backticks around odd ones; compared without case, as MySQL does), numbers,
  strings in single or double quotes (``''`` or ``\\'`` for a quote), ``NULL``, ``TRUE``, ``FALSE``;
- ``=``, ``<>``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``IS [NOT] NULL``, ``[NOT] IN (...)``,
  ``[NOT] BETWEEN ... AND ...``, ``[NOT] LIKE '...'`` (``%`` and ``_``), ``AND``, ``OR``, ``NOT``,
  parentheses. Nothing else: no functions, no arithmetic, no subqueries, nothing that could run.

A literal compared with a column takes the column's type, checked when the filter is compiled
against the table's schema: numbers for numeric columns, ISO text for dates, times and datetimes
(a TIMESTAMP's literal is UTC, as the pipeline's values are), text for text, its UTF-8 for binary
data. Text compares exactly, code point by code point (case, accents and trailing spaces count),
where the server would compare under the column's collation.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, SchemaChangedError
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableSchema

Row = dict[str, Any]
Value = Callable[[Row], Any]

_TOKEN = re.compile(r"""\s*(?:
    (?P<quoted>`(?:[^`]|``)+`)
  | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)
  | (?P<op><=|>=|<>|!=|=|<|>|\(|\)|,|-)
  | (?P<word>[^\W\d]\w*|\$\w*)
)""", re.VERBOSE | re.UNICODE)
_KEYWORDS = {"AND", "OR", "NOT", "IS", "NULL", "IN", "BETWEEN", "LIKE", "TRUE", "FALSE"}
_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "float", "double", "year", "bit"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_SPATIAL = {"point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}
_COMPARE = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, "!=": lambda a, b: a != b,
            "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


class _Literal:
    """A literal as written, converted to a column's type once it meets one."""

    def __init__(self, value: Any, text: str):
        self.value, self.text = value, text


class _Column:
    def __init__(self, column: Column):
        self.column = column


Operand = _Literal | _Column


def _tokens(text: str, table: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ConfigurationError(f"Row filter {text!r} of {table} cannot be read at {text[position:position + 20]!r}: "
                                     "write a predicate such as \"status = 'paid' AND amount > 10\".")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "word" and value.upper() in _KEYWORDS:
            kind, value = "keyword", value.upper()
        tokens.append((kind, value))
        position = match.end()
    return tokens


def _string(token: str) -> str:
    quote, body = token[0], token[1:-1]
    # as MySQL reads them; \% and \_ keep their backslash, for LIKE
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "0": "\0", "%": "\\%", "_": "\\_"}.get(
        m.group(1), m.group(1)), body.replace(quote * 2, quote), flags=re.S)


#: the type of a column read without a schema (``parse_row_filter``): its literals are not checked
_ANY = "any"


class _Parser:
    def __init__(self, text: str, schema: TableSchema | None, entry: str = "a table"):
        """``schema`` None: only the syntax is checked (any column name, any literal), of the filter of
        ``entry``."""
        self.text, self.schema = text, schema
        self.table = str(schema.table_id) if schema is not None else entry
        self.tokens = _tokens(text, self.table)
        self.at = 0
        self.columns = {c.name.lower(): c for c in schema.columns} if schema is not None else {}
        self.used: set[str] = set()

    # --- tokens -----------------------------------------------------------------------------------
    def _peek(self, offset: int = 0) -> tuple[str, str]:
        index = self.at + offset
        return self.tokens[index] if index < len(self.tokens) else ("end", "")

    def _take(self, kind: str, value: str | None = None) -> str:
        found = self._peek()
        if found[0] != kind or (value is not None and found[1] != value):
            self._fail(f"expected {value or kind}")
        self.at += 1
        return found[1]

    def _accept(self, kind: str, value: str) -> bool:
        if self._peek() == (kind, value):
            self.at += 1
            return True
        return False

    def _fail(self, what: str) -> None:
        got = self._peek()[1] or "the end"
        raise ConfigurationError(f"Row filter {self.text!r} of {self.table}: {what}, found {got!r}. The "
                                 "language is SQL's WHERE without functions: comparisons, IS NULL, IN, BETWEEN, LIKE, "
                                 "AND, OR, NOT and parentheses.")

    # --- grammar ----------------------------------------------------------------------------------
    def parse(self) -> Value:
        predicate = self._or()
        if self._peek()[0] != "end":
            self._fail("expected AND, OR or the end")
        return predicate

    def _or(self) -> Value:
        parts = [self._and()]
        while self._accept("keyword", "OR"):
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else _any(parts)

    def _and(self) -> Value:
        parts = [self._not()]
        while self._accept("keyword", "AND"):
            parts.append(self._not())
        return parts[0] if len(parts) == 1 else _all(parts)

    def _not(self) -> Value:
        if self._accept("keyword", "NOT"):
            inner = self._not()
            return lambda row: None if (v := inner(row)) is None else not v
        return self._predicate()

    def _predicate(self) -> Value:
        if self._accept("op", "("):
            inner = self._or()
            self._take("op", ")")
            return inner
        left = self._operand()
        kind, value = self._peek()
        if kind == "op" and value in _COMPARE:
            self.at += 1
            return _comparison(value, left, self._operand(), self)
        if self._accept("keyword", "IS"):
            negate = self._accept("keyword", "NOT")
            self._take("keyword", "NULL")
            get = self._value(left)
            return (lambda row: get(row) is not None) if negate else (lambda row: get(row) is None)
        negate = self._accept("keyword", "NOT")
        if self._accept("keyword", "IN"):
            return _negated(negate, self._in(left))
        if self._accept("keyword", "BETWEEN"):
            low = self._operand()
            self._take("keyword", "AND")
            high = self._operand()
            return _negated(negate, _all([_comparison(">=", left, low, self), _comparison("<=", left, high, self)]))
        if self._accept("keyword", "LIKE"):
            return _negated(negate, self._like(left))
        if negate:
            self._fail("expected IN, BETWEEN or LIKE after NOT")
        self._fail("expected a comparison, IS NULL, IN, BETWEEN or LIKE")
        raise AssertionError  # _fail raises

    def _operand(self) -> Operand:
        kind, value = self._peek()
        self.at += 1
        if kind == "quoted":
            return self._column(value[1:-1].replace("``", "`"))
        if kind == "word":
            if self._peek() == ("op", "("):
                self.at -= 1
                self._fail(f"functions such as {value}() are not part of the language")
            return self._column(value)
        if kind == "string":
            return _Literal(_string(value), value)
        if kind == "number":
            return _Literal(decimal.Decimal(value), value)
        if (kind, value) == ("op", "-") and self._peek()[0] == "number":
            number = self._take("number")
            return _Literal(-decimal.Decimal(number), "-" + number)
        if kind == "keyword" and value in ("NULL", "TRUE", "FALSE"):
            return _Literal({"NULL": None, "TRUE": decimal.Decimal(1), "FALSE": decimal.Decimal(0)}[value], value)
        self.at -= 1
        self._fail("expected a column name or a value")
        raise AssertionError  # _fail raises

    def _column(self, name: str) -> _Column:
        column = self.columns.get(name.lower())
        if column is None and self.schema is None:
            column = Column(name, _ANY, _ANY, True)
        if column is None:
            assert self.schema is not None
            raise ConfigurationError(f"Row filter {self.text!r} names column {name!r}, which {self.schema.table_id} "
                                     f"does not capture; its columns are: {', '.join(self.schema.column_names)}.")
        self.used.add(column.name)
        return _Column(column)

    def _value(self, operand: Operand, typed_as: Column | None = None) -> Value:
        if isinstance(operand, _Column):
            return _column_value(operand.column.name, self.table)
        constant = _typed(operand, typed_as, self) if typed_as is not None else operand.value
        return lambda row: constant

    def _in(self, left: Operand) -> Value:
        self._take("op", "(")
        items = [self._operand()]
        while self._accept("op", ","):
            items.append(self._operand())
        self._take("op", ")")
        column = left.column if isinstance(left, _Column) else None
        if any(isinstance(i, _Column) for i in items):
            self._fail("IN takes values, not columns")
        values = [_typed(i, column, self) if column is not None else i.value for i in items if isinstance(i, _Literal)]
        get, has_null = self._value(left), any(v is None for v in values)
        listed = [v for v in values if v is not None]

        def member(row: Row) -> bool | None:
            value = get(row)
            if value is None:
                return None
            found = _safe(lambda: any(value == v for v in listed))
            return True if found else (None if has_null or found is None else False)
        return member

    def _like(self, left: Operand) -> Value:
        pattern = self._operand()
        if not isinstance(left, _Column) or not isinstance(pattern, _Literal) or not isinstance(pattern.value, str):
            self._fail("LIKE compares a column with a quoted pattern")
        assert isinstance(left, _Column) and isinstance(pattern, _Literal)
        if left.column.data_type not in _TEXT | _BYTES | {_ANY}:
            raise ConfigurationError(f"Row filter {self.text!r} of {self.table}: LIKE needs a text or binary column, and "
                                     f"{left.column.name} is {left.column.column_type}.")
        # % any run, _ any one character, a backslash escapes the next one (as MySQL's default ESCAPE)
        regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c[-1])
                        for c in re.findall(r"\\.|.", pattern.value, re.S))
        compiled = re.compile(regex, re.S)
        binary = re.compile(regex.encode("utf-8"), re.S)
        get = self._value(left)

        def like(row: Row) -> bool | None:
            value = get(row)
            if value is None:
                return None
            return bool((binary if isinstance(value, bytes) else compiled).fullmatch(value))
        return like


def _column_value(name: str, table: str) -> Value:
    def get(row: Row) -> Any:
        try:
            return row[name]
        except KeyError:
            raise SchemaChangedError(f"the row filter of {table} uses column {name!r}, which its rows no "
                                     "longer have (a DDL dropped or renamed it): change the filter, then re-snapshot "
                                     "the table") from None
    return get


def _typed(literal: _Literal, column: Column | None, parser: _Parser) -> Any:
    """``literal`` as a value of ``column``'s type (as records/values.py normalises it)."""
    value = literal.value
    if value is None or column is None or column.data_type == _ANY:
        return value
    t = column.data_type
    try:
        if t == "geometry" or t in _SPATIAL:
            raise ValueError("no literal of a spatial type")
        if t in _NUMERIC:
            return value if isinstance(value, decimal.Decimal) else decimal.Decimal(value.strip())
        if isinstance(value, decimal.Decimal):
            raise ValueError("a number")
        if t in _TEXT:
            return value
        if t in _BYTES:
            return value.encode("utf-8")
        if t == "date":
            return dt.date.fromisoformat(value.strip())
        if t in ("datetime", "timestamp"):
            parsed = dt.datetime.fromisoformat(value.strip())
            return parsed.replace(tzinfo=dt.timezone.utc) if t == "timestamp" and parsed.tzinfo is None else parsed
        if t == "time":
            text = value.strip()
            sign = -1 if text.startswith("-") else 1
            hours, minutes, seconds = text.lstrip("-").split(":")
            return sign * dt.timedelta(hours=int(hours), minutes=int(minutes), seconds=float(seconds))
    except (ValueError, decimal.InvalidOperation):
        pass
    raise ConfigurationError(f"Row filter {parser.text!r} of {parser.table}: {literal.text} is not a value of {column.name} "
                             f"({column.column_type}): write a number for a numeric column, quoted ISO text such as "
                             "'2024-05-01' or '2024-05-01 10:00:00' for a date or time, quoted text otherwise.")


def _safe(compare: Callable[[], Any]) -> Any:
    """A comparison, unknown (None) where the values cannot be compared (a zero date key)."""
    try:
        return compare()
    except TypeError:
        return None


def _comparison(op: str, left: Operand, right: Operand, parser: _Parser) -> Value:
    left_type = left.column if isinstance(left, _Column) else None
    right_type = right.column if isinstance(right, _Column) else None
    get_left, get_right = parser._value(left, right_type), parser._value(right, left_type)
    compare = _COMPARE[op]

    def evaluate(row: Row) -> bool | None:
        a, b = get_left(row), get_right(row)
        if a is None or b is None:
            return None
        return _safe(lambda: bool(compare(a, b)))
    return evaluate


def _negated(negate: bool, inner: Value) -> Value:
    return (lambda row: None if (v := inner(row)) is None else not v) if negate else inner


def _junction(parts: list[Value], decisive: bool) -> Value:
    """AND (``decisive`` False) or OR (True) under SQL's NULL logic: a part with the decisive value
    decides; otherwise the result is unknown when a part is, else the other value."""
    def evaluate(row: Row) -> bool | None:
        unknown = False
        for part in parts:
            value = part(row)
            if value is decisive:
                return decisive
            unknown = unknown or value is None
        return None if unknown else not decisive
    return evaluate


def _all(parts: list[Value]) -> Value:
    return _junction(parts, False)


def _any(parts: list[Value]) -> Value:
    return _junction(parts, True)


class RowFilter:
    """A compiled row filter of one table: ``keeps(row)`` is true where the predicate is."""

    def __init__(self, text: str, schema: TableSchema):
        parser = _Parser(text, schema)
        self.text = text
        self._predicate = parser.parse()
        #: the columns the filter reads
        self.columns = frozenset(parser.used)

    def keeps(self, row: Row) -> bool:
        return self._predicate(row) is True


def parse_row_filter(text: str, entry: str) -> None:
    """Refuse a filter that cannot be read, before any table is known (a DAG being parsed), naming its
    ``row_filters`` entry (a table, or a pattern)."""
    _Parser(text, None, entry).parse()


def check_row_filter(text: str, schema: TableSchema) -> RowFilter:
    """The filter compiled against ``schema``: a clear error for one that does not parse, names a column
    the table does not capture, or compares a column with a value not of its type."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"The row filter of {schema.table_id} must be a predicate such as "
                                 f"\"status = 'paid'\", got {text!r}.")
    return RowFilter(text, schema)
