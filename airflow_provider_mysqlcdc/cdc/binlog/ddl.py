"""What a DDL statement in the binlog does to tables: parsed, not matched by prefix.

A row-based binlog carries DDL as statement text (a ``QueryEvent``). What the stream must do
depends on the statement's effect on each captured table, so the text is lexed with sqlglot's
MySQL tokenizer (comments, backticks with doubled backticks, strings, unicode names) and the
table-level grammar is parsed here. sqlglot's own parser covers only part of it (``RENAME TABLE``
lists, the partition operations, ``ALTER ONLINE|IGNORE`` and MariaDB's ``WAIT n`` fall back to an
opaque command there), so the grammar below is ours; its tokens are sqlglot's.

Executable comments (``/*!50100 ... */``, MariaDB's ``/*M!100100 ... */``) are unwrapped first: the
server ran their content, so it counts.

Recognised (each name may be ``db.table``, backticked, or unqualified, which means the statement's
default database):

- ``TRUNCATE [TABLE] t``                          -> TRUNCATED
- ``DROP TABLE[S] [IF EXISTS] a, b``              -> DROPPED for each
- ``DROP DATABASE|SCHEMA d``                       -> every table of ``d`` (``DdlStatement.dropped_database``)
- ``RENAME TABLE[S] a TO b, c TO d``               -> a RENAMED (to b), b REPLACED, ...
- ``ALTER TABLE a RENAME [TO|AS] b``               -> the same
- ``CREATE OR REPLACE TABLE t``                    -> REPLACED
- ``CREATE TABLE [IF NOT EXISTS] t``               -> CREATED
- ``ALTER TABLE t TRUNCATE|DROP PARTITION``, ``EXCHANGE PARTITION p WITH TABLE u``,
  ``DISCARD|IMPORT TABLESPACE``                    -> ROWS_CHANGED (rows go or come without row events)
- any other ``ALTER TABLE``, ``CREATE|DROP INDEX`` -> ALTERED (with the names of the columns an
  ``ADD [COLUMN]`` clause adds)

Temporary tables are never in a row-based binlog's row events, so statements on them change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.dialects.mysql import MySQL
from sqlglot.tokens import Token, TokenType

from airflow_provider_mysqlcdc.cdc.model.records import TableChange, TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId

_TOKENIZER = MySQL().tokenizer_class()
_QUOTED = {TokenType.IDENTIFIER, TokenType.STRING}
_SEPARATORS = {TokenType.COMMA, TokenType.DOT, TokenType.L_PAREN, TokenType.R_PAREN, TokenType.SEMICOLON}
#: statements that are never DDL and are frequent (one per transaction): skip the tokenizer
_NOT_DDL = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "XA START", "XA END", "XA PREPARE", "XA COMMIT"})
#: what follows DROP in an ALTER TABLE clause that drops something other than a column
_DROP_NOT_A_COLUMN = frozenset({"INDEX", "KEY", "CONSTRAINT", "PRIMARY", "FOREIGN", "CHECK", "PARTITION", "PERIOD",
                                "SYSTEM", "DEFAULT"})
#: what follows ADD in an ALTER TABLE clause that adds no column
_ADD_NOT_A_COLUMN = frozenset({"INDEX", "KEY", "CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "FULLTEXT", "SPATIAL",
                               "CHECK", "PARTITION", "PERIOD", "SYSTEM", "VECTOR"})


@dataclass(frozen=True)
class DdlStatement:
    changes: tuple[TableChange, ...] = ()
    dropped_database: str | None = None


def parse_ddl(statement: str, default_database: str | None) -> DdlStatement | None:
    """What ``statement`` does to tables, or None when it touches no table (or is no DDL)."""
    if statement.strip().upper() in _NOT_DDL:
        return None
    tokens = _tokens(statement)
    if not tokens:
        return None
    return _Parser(tokens, default_database or None).statement()


def _tokens(statement: str) -> list[Token]:
    tokens = _TOKENIZER.tokenize(_unwrap_executable_comments(statement))
    if len(tokens) == 2 and tokens[0].text.upper() == "RENAME" and tokens[1].token_type == TokenType.STRING:
        # sqlglot lexes RENAME as a command and keeps the rest as one string: lex that rest too
        return [tokens[0]] + _TOKENIZER.tokenize(tokens[1].text)
    return tokens


def _unwrap_executable_comments(text: str) -> str:
    """``/*!50100 X */`` and ``/*M!100100 X */`` -> `` X `` (outside quotes); other comments stay."""
    if "/*!" not in text and "/*M!" not in text:
        return text
    out: list[str] = []
    i, n, quote, depth = 0, len(text), "", 0
    while i < n:
        c = text[i]
        if quote:
            out.append(c)
            if c == "\\" and quote != "`" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"`":
            quote = c
            out.append(c)
        elif text.startswith("/*!", i) or text.startswith("/*M!", i):
            i += 3 if text[i + 2] == "!" else 4
            while i < n and text[i].isdigit():
                i += 1
            depth += 1
            out.append(" ")
            continue
        elif depth and text.startswith("*/", i):
            depth -= 1
            out.append(" ")
            i += 2
            continue
        elif text.startswith("/*", i):  # an ordinary comment: copy it whole, the tokenizer drops it
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(text[i:end])
            i = end
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


class _Parser:
    def __init__(self, tokens: list[Token], default_database: str | None):
        self.tokens = tokens
        self.default_database = default_database
        self.i = 0

    # --- token helpers ---------------------------------------------------------------------------
    def _word(self, offset: int = 0) -> str:
        """The keyword at the cursor (upper case); '' for a quoted name, a string or the end."""
        j = self.i + offset
        if j >= len(self.tokens) or self.tokens[j].token_type in _QUOTED:
            return ""
        return self.tokens[j].text.upper()

    def _accept(self, *words: str) -> bool:
        """Consume the keywords ``words`` if they come next."""
        if all(self._word(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def _at(self, token_type: TokenType) -> bool:
        return self.i < len(self.tokens) and self.tokens[self.i].token_type == token_type

    def _name_part(self) -> str | None:
        if self.i >= len(self.tokens) or self.tokens[self.i].token_type in _SEPARATORS:
            return None
        token = self.tokens[self.i]
        self.i += 1
        text = token.text
        # an unquoted name may lex as several tokens (``1a`` as a number and a word): join adjacent ones
        while (token.token_type not in _QUOTED and self.i < len(self.tokens)
               and self.tokens[self.i].start == token.end + 1
               and self.tokens[self.i].token_type not in _SEPARATORS | _QUOTED):
            token = self.tokens[self.i]
            text += token.text
            self.i += 1
        return text

    def _table_name(self) -> TableId | None:
        first = self._name_part()
        if first is None:
            return None
        if self._at(TokenType.DOT):
            self.i += 1
            second = self._name_part()
            return TableId(first, second) if second is not None else None
        return TableId(self.default_database, first) if self.default_database else None

    def _skip_wait(self) -> None:
        if self._accept("NOWAIT"):
            return
        if self._word() == "WAIT" and self.i + 1 < len(self.tokens) and \
                self.tokens[self.i + 1].token_type == TokenType.NUMBER:
            self.i += 2

    def _skip_to_comma(self) -> None:
        """Past the rest of the current clause, to its top-level comma (or the end)."""
        depth = 0
        while self.i < len(self.tokens):
            kind = self.tokens[self.i].token_type
            if kind == TokenType.L_PAREN:
                depth += 1
            elif kind == TokenType.R_PAREN:
                depth -= 1
            elif kind == TokenType.COMMA and depth == 0:
                return
            self.i += 1

    # --- grammar ---------------------------------------------------------------------------------
    def statement(self) -> DdlStatement | None:
        verb = self._word()
        self.i += 1
        handler = {"TRUNCATE": self._truncate, "DROP": self._drop, "RENAME": self._rename,
                   "CREATE": self._create, "ALTER": self._alter}.get(verb)
        if handler is None:
            return None
        result = handler()
        return result if result is not None and (result.changes or result.dropped_database) else None

    def _truncate(self) -> DdlStatement | None:
        self._accept("TABLE")
        table = self._table_name()
        return DdlStatement((TableChange(TableEventKind.TRUNCATED, table),)) if table else None

    def _drop(self) -> DdlStatement | None:
        if self._accept("DATABASE") or self._accept("SCHEMA"):
            self._accept("IF", "EXISTS")
            name = self._name_part()
            return DdlStatement(dropped_database=name) if name else None
        if self._accept("TEMPORARY"):
            return None
        if self._accept("TABLE") or self._accept("TABLES"):
            self._accept("IF", "EXISTS")
            return DdlStatement(tuple(TableChange(TableEventKind.DROPPED, t) for t in self._table_list()))
        return self._index_on_table()

    def _table_list(self) -> list[TableId]:
        tables = []
        while True:
            table = self._table_name()
            if table is not None:
                tables.append(table)
            if not self._at(TokenType.COMMA):
                return tables
            self.i += 1

    def _rename(self) -> DdlStatement | None:
        if not (self._accept("TABLE") or self._accept("TABLES")):
            return None  # RENAME USER and the like
        changes: list[TableChange] = []
        while True:
            old = self._table_name()
            self._skip_wait()
            if not self._accept("TO"):
                break
            new = self._table_name()
            if old is not None and new is not None:
                changes += _renamed(old, new)
            if not self._at(TokenType.COMMA):
                break
            self.i += 1
        return DdlStatement(tuple(changes))

    def _create(self) -> DdlStatement | None:
        replace = self._accept("OR", "REPLACE")
        if self._accept("TEMPORARY"):
            return None
        if self._accept("TABLE"):
            self._accept("IF", "NOT", "EXISTS")
            table = self._table_name()
            if table is None:
                return None
            return DdlStatement((TableChange(TableEventKind.REPLACED if replace else TableEventKind.CREATED, table),))
        return self._index_on_table()

    def _index_on_table(self) -> DdlStatement | None:
        """``[ONLINE|OFFLINE] [UNIQUE|FULLTEXT|SPATIAL] INDEX name ON t ...`` (CREATE or DROP)."""
        for word in ("ONLINE", "OFFLINE", "UNIQUE", "FULLTEXT", "SPATIAL"):
            self._accept(word)
        if not self._accept("INDEX"):
            return None
        self._accept("IF", "NOT", "EXISTS") or self._accept("IF", "EXISTS")
        self._name_part()
        if not self._accept("ON"):
            return None
        table = self._table_name()
        return DdlStatement((TableChange(TableEventKind.ALTERED, table),)) if table else None

    def _alter(self) -> DdlStatement | None:
        self._accept("ONLINE")
        self._accept("IGNORE")
        if not self._accept("TABLE"):
            return None
        self._accept("IF", "EXISTS")
        table = self._table_name()
        if table is None:
            return None
        self._skip_wait()
        changes: list[TableChange] = []
        added: list[str] = []
        altered = removes = False
        while self.i < len(self.tokens):
            removes = removes or self._removes_a_column()
            columns = self._added_columns()
            change = None if columns is not None else self._alter_clause(table)
            if change is None:
                altered = True
                added += columns or []
            else:
                changes.extend(change)
            self._skip_to_comma()
            if self._at(TokenType.COMMA):
                self.i += 1
        if altered or not changes:
            changes.insert(0, TableChange(TableEventKind.ALTERED, table, added_columns=tuple(added),
                                          removes_columns=removes))
        return DdlStatement(tuple(changes))

    def _removes_a_column(self) -> bool:
        """Whether the clause here may remove or rename a column: ``DROP [COLUMN] [IF EXISTS] name``,
        ``CHANGE [COLUMN] old new ...``, ``RENAME COLUMN old TO new``."""
        word, following = self._word(), (self._word(1).split() or [""])[0]
        if word == "DROP":
            return following not in _DROP_NOT_A_COLUMN
        return word == "CHANGE" or (word == "RENAME" and following == "COLUMN")

    def _added_columns(self) -> list[str] | None:
        """The names an ``ADD [COLUMN] [IF NOT EXISTS] name ...`` or ``ADD [COLUMN] (name ..., ...)``
        clause adds; None for any other clause (``ADD INDEX``, ``ADD PRIMARY KEY``, ...)."""
        following = self._word(1).split()  # sqlglot lexes some keyword pairs as one token: 'PRIMARY KEY'
        if self._word() != "ADD" or (following and following[0] in _ADD_NOT_A_COLUMN):
            return None
        self.i += 1
        self._accept("COLUMN")
        self._accept("IF", "NOT", "EXISTS")
        if not self._at(TokenType.L_PAREN):
            name = self._name_part()
            return [name] if name is not None else []
        names: list[str] = []
        depth, expect_name = 0, False
        while self.i < len(self.tokens):  # a list of column definitions: a name after "(" and each comma
            kind = self.tokens[self.i].token_type
            if kind == TokenType.L_PAREN:
                depth += 1
                expect_name = depth == 1
            elif kind == TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return names
            elif kind == TokenType.COMMA and depth == 1:
                expect_name = True
            elif expect_name:
                names.append(self.tokens[self.i].text)
                expect_name = False
            self.i += 1
        return names

    def _alter_clause(self, table: TableId) -> list[TableChange] | None:
        """The change one ALTER TABLE clause makes, or None for a schema change (columns, keys, options)."""
        if self._word() == "RENAME" and self._word(1) not in ("COLUMN", "INDEX", "KEY", "CONSTRAINT"):
            self.i += 1
            self._accept("TO") or self._accept("AS")
            new = self._table_name()
            return _renamed(table, new) if new is not None else None
        # partition operations stand alone in a statement: what follows is their partition list
        if self._accept("TRUNCATE", "PARTITION") or self._accept("DROP", "PARTITION"):
            self.i = len(self.tokens)
            return [TableChange(TableEventKind.ROWS_CHANGED, table)]
        if self._accept("EXCHANGE", "PARTITION"):
            self._name_part()
            if self._accept("WITH", "TABLE"):
                other = self._table_name()
                if other is not None:
                    self.i = len(self.tokens)
                    return [TableChange(TableEventKind.ROWS_CHANGED, table, other),
                            TableChange(TableEventKind.ROWS_CHANGED, other, table)]
            return [TableChange(TableEventKind.ROWS_CHANGED, table)]
        if self._word() in ("DISCARD", "IMPORT"):
            return [TableChange(TableEventKind.ROWS_CHANGED, table)]
        return None


def _renamed(old: TableId, new: TableId) -> list[TableChange]:
    return [TableChange(TableEventKind.RENAMED, old, new), TableChange(TableEventKind.REPLACED, new, old)]
