"""Generates airflow_provider_mysqlcdc/cdc/records/charset_tables.py from a running server.

- Each single-byte character set's table is what the server makes of the bytes 0x00..0xFF when it
  converts them to Unicode (``CONVERT(... USING utf32)``), which is what a client reading the column
  over a utf8mb4 connection gets.
- Each multi-byte character set's *extras*: the characters of its repertoire (what the server
  converts to the set and back unchanged) whose bytes the Python codec it is decoded with
  (records/charsets.py ``MULTI_BYTE``) cannot decode, such as Big5's ETEN additions and the
  user-defined rows of EUC-JP, or decodes to another character (eucJP-ms's Microsoft mappings);
  the codec decodes everything else exactly as the server does.

``tests/integration/test_charsets.py`` compares the shipped tables with the server the suite runs
on; regenerate with

    .venv/bin/python -m tests.tools.charset_tables
"""

from __future__ import annotations

import codecs
from pathlib import Path

import pymysql

TARGET = Path(__file__).resolve().parents[2] / "airflow_provider_mysqlcdc" / "cdc" / "records" / "charset_tables.py"


def single_byte_tables(conn: pymysql.connections.Connection) -> dict[str, str]:
    """Per single-byte charset of the server, the 256 characters its bytes convert to."""
    every_byte = "".join(f"{i:02X}" for i in range(256))
    tables = {}
    with conn.cursor() as cur:
        cur.execute("SHOW CHARACTER SET WHERE Maxlen = 1 AND Charset <> 'binary'")
        for (name, *_) in sorted(cur.fetchall()):
            cur.execute(f"SELECT HEX(CONVERT(CONVERT(UNHEX(%s) USING `{name}`) USING utf32))", (every_byte,))
            text = cur.fetchone()[0]
            tables[name] = "".join(chr(int(text[i:i + 8], 16)) for i in range(0, len(text), 8))
    return tables


def create_candidates(cur, database: str) -> None:
    """``database.candidates``: every Basic Multilingual Plane code point from U+0080 (no surrogates),
    and every 97th of planes 1 and 2, one row each."""
    cur.execute(f"CREATE TABLE `{database}`.candidates (cp INT PRIMARY KEY, c VARCHAR(1) "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)")
    cur.execute(f"INSERT INTO `{database}`.candidates SELECT seq, CONVERT(CHAR(seq USING utf32) USING utf8mb4) "
                f"FROM `{database}`.seq_128_to_196607 WHERE seq NOT BETWEEN 55296 AND 57343 "
                "AND (seq < 65536 OR seq % 97 = 0)")


def repertoire(cur, database: str, charset: str) -> list[tuple[str, bytes]]:
    """The candidates the server converts to ``charset`` and back unchanged, with their bytes there."""
    cur.execute(f"SELECT cp, HEX(CONVERT(c USING `{charset}`)) FROM `{database}`.candidates "
                f"WHERE CAST(CONVERT(CONVERT(c USING `{charset}`) USING utf8mb4) AS BINARY) = CAST(c AS BINARY) "
                "ORDER BY cp")
    return [(chr(cp), bytes.fromhex(text)) for cp, text in cur.fetchall()]


def multi_byte_extras(conn: pymysql.connections.Connection, database: str,
                      base_codecs: dict[str, str]) -> dict[str, dict[bytes, str]]:
    """Per multi-byte charset, the characters its base codec cannot decode or decodes otherwise."""
    extras: dict[str, dict[bytes, str]] = {}
    with conn.cursor() as cur:
        cur.execute("SHOW CHARACTER SET WHERE Maxlen > 1")
        for (name, *_) in sorted(cur.fetchall()):
            base = base_codecs.get(name)
            if base is None:
                continue
            for char, raw in repertoire(cur, database, name):
                try:
                    decoded = codecs.decode(raw, base)
                except UnicodeDecodeError:
                    extras.setdefault(name, {})[raw] = char
                    continue
                if decoded != char:  # decoded, but not as the server does: the decoder finds these first
                    extras.setdefault(name, {})[raw] = char
    return extras


def module_text(tables: dict[str, str], extras: dict[str, dict[bytes, str]]) -> str:
    lines = ['"""What the server makes of character sets\' bytes, where Python\'s codecs do not know (generated',
             "by tests/tools/charset_tables.py from MariaDB's own conversions; do not edit).", '"""', "",
             "#: per single-byte charset, the characters of its bytes 0x00..0xFF", "SINGLE_BYTE = {"]
    lines += [f"    {name!r}: {table!r}," for name, table in sorted(tables.items())]
    lines += ["}", "", "#: per multi-byte charset, the byte sequences its base codec cannot decode (or decodes otherwise), and",
              "#: their characters",
              "MULTI_BYTE_EXTRAS = {"]
    for name, table in sorted(extras.items()):
        lines.append(f"    {name!r}: {{")
        lines += [f"        {raw!r}: {char!r}," for raw, char in sorted(table.items())]
        lines.append("    },")
    return "\n".join(lines + ["}", ""])


def main() -> None:
    from airflow_provider_mysqlcdc.cdc.records.charsets import MULTI_BYTE
    from devtools.throwaway_server import ThrowawayMariaDB

    with ThrowawayMariaDB() as server:
        conn = server.connect_root()
        conn.autocommit(True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE charset_tables")
            create_candidates(cur, "charset_tables")
        TARGET.write_text(module_text(single_byte_tables(conn), multi_byte_extras(conn, "charset_tables", MULTI_BYTE)))
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
