"""How a MySQL character set's bytes become text, the same way the server converts them.

The snapshot's ``SELECT`` gets text the server converted to utf8mb4; the binlog carries a column's
raw bytes in its own character set, which the reader must convert exactly as the server would.
Python's codecs of the same names disagree with the server in places (MySQL's ``latin1`` is
Windows-1252 with its five holes filled, its ``utf16`` is big-endian, ``greek`` and ``hebrew``
differ in a dozen bytes each), and Python has no codec at all for some (``macce``, ``keybcs2``,
``dec8``, ``hp8``, ``armscii8``, ``geostd8``, ``swe7``). So:

- every single-byte character set decodes through a table of what the server makes of each of its
  256 bytes (charset_tables.py, generated from the server's own conversions and compared with the
  server the suite runs on);
- the multi-byte ones through the Python codec that decodes them as the server does
  (``MULTI_BYTE``; the UTF-16 and UTF-32 families are big-endian except ``utf16le``, ``euckr`` is
  Windows-949), plus, where the server knows characters that codec does not or maps otherwise (Big5's
  ETEN additions, the user-defined rows of EUC-JP, eucJP-ms's Microsoft mappings), a table of those
  byte sequences (charset_tables.py ``MULTI_BYTE_EXTRAS``): a sequence the codec cannot decode is
  looked up there, and where one it would decode otherwise can occur, the text is walked character
  by character (by the set's lead bytes) so that those sequences are found at character starts.

Each set's whole repertoire is compared with the server character by character, through every
decoder, by tests/integration/test_charsets.py. ``codec_name`` is the one answer every decoder uses
(the row decoders, the library's decoding, the normaliser); the tables are registered as Python
codecs named ``mysqlcdc_<charset>``.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.records.charset_tables import MULTI_BYTE_EXTRAS, SINGLE_BYTE

#: the Python codec of each multi-byte character set (MySQL's and MariaDB's names)
MULTI_BYTE = {
    "utf8": "utf-8", "utf8mb3": "utf-8", "utf8mb4": "utf-8",
    "utf16": "utf-16-be", "ucs2": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be",
    "big5": "big5", "gb2312": "gb2312", "gbk": "gbk", "gb18030": "gb18030",
    "sjis": "shift_jis", "cp932": "cp932", "ujis": "euc_jp", "eucjpms": "euc_jp", "euckr": "cp949",
}
CODEC_PREFIX = "mysqlcdc_"
#: python-mysql-replication names a table map's charsets by pymysql's codec names, which differ from
#: the server's for these (its ``cp1252`` is the server's ``latin1``, not Windows-1252)
_LIBRARY_NAMES = {"cp1252": "latin1", "koi8_r": "koi8r", "koi8_u": "koi8u"}


def codec_name(charset: str | None) -> str:
    """The Python codec that decodes ``charset``'s bytes as the server converts them (None: UTF-8,
    what a table map without charsets implies)."""
    if charset is None:
        return "utf-8"
    name = _LIBRARY_NAMES.get(charset.lower(), charset.lower())
    if name in MULTI_BYTE_EXTRAS:
        return CODEC_PREFIX + name
    if name in MULTI_BYTE:
        return MULTI_BYTE[name]
    if name in SINGLE_BYTE:
        return CODEC_PREFIX + name
    raise ConfigurationError(
        f"Character set {charset!r} is not one this version of the provider decodes. Convert the column "
        f"(ALTER TABLE ... MODIFY col ... CHARACTER SET utf8mb4), or leave its table out of the pipeline.")


def decodable(charset: str | None) -> bool:
    if charset is None:
        return True
    name = _LIBRARY_NAMES.get(charset.lower(), charset.lower())
    return name in MULTI_BYTE or name in SINGLE_BYTE


def _char_length(charset: str) -> Callable[[bytes, int], int]:
    """How many bytes the character at ``data[i]`` takes in a multi-byte set (by its lead byte)."""
    if charset in ("ujis", "eucjpms"):
        return lambda data, i: 3 if data[i] == 0x8F else 2 if data[i] == 0x8E or data[i] >= 0xA1 else 1
    if charset in ("sjis", "cp932"):
        return lambda data, i: 2 if 0x81 <= data[i] <= 0x9F or 0xE0 <= data[i] <= 0xFC else 1
    if charset == "gb18030":
        return lambda data, i: 1 if data[i] < 0x81 else 4 if i + 1 < len(data) and 0x30 <= data[i + 1] <= 0x39 else 2
    return lambda data, i: 2 if data[i] >= 0x81 else 1  # big5, gbk, gb2312, euckr


def _multi_byte_codec(charset: str) -> codecs.CodecInfo:
    base, extras = MULTI_BYTE[charset], MULTI_BYTE_EXTRAS[charset]
    handler = f"{CODEC_PREFIX}{charset}_extras"
    longest = max(len(raw) for raw in extras)

    def undecodable(error: UnicodeError) -> tuple[str, int]:
        if not isinstance(error, UnicodeDecodeError):
            raise error
        data = error.object
        for length in range(longest, 0, -1):
            raw = bytes(data[error.start:error.start + length])
            if len(raw) == length and raw in extras:
                return extras[raw], error.start + length
        raise error

    codecs.register_error(handler, undecodable)
    # sequences the base codec decodes, but to another character than the server: found by walking
    otherwise = {raw for raw in extras if _decodes(raw, base)}
    leads = {raw[0] for raw in otherwise}
    length = _char_length(charset)

    def decode(data: bytes, errors: str = "strict") -> tuple[str, int]:
        data = bytes(data)
        if not leads or not any(byte in leads for byte in data):
            return codecs.decode(data, base, handler), len(data)
        parts, start, i = [], 0, 0
        while i < len(data):
            step = length(data, i)
            if data[i] in leads and bytes(data[i:i + step]) in otherwise:
                parts += [codecs.decode(data[start:i], base, handler), extras[bytes(data[i:i + step])]]
                start = i + step
            i += step
        parts.append(codecs.decode(data[start:], base, handler))
        return "".join(parts), len(data)

    def encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
        return codecs.encode(text, base, errors), len(text)

    return codecs.CodecInfo(encode, decode, name=CODEC_PREFIX + charset)  # type: ignore[arg-type]  # typeshed: decode takes bytes-like


def _decodes(raw: bytes, base: str) -> bool:
    try:
        codecs.decode(raw, base)
        return True
    except UnicodeDecodeError:
        return False


def _single_byte_codec(name: str) -> codecs.CodecInfo:
    table = SINGLE_BYTE[name]
    encoding_map = {ord(char): byte for byte, char in reversed(list(enumerate(table)))}

    def decode(data: bytes, errors: str = "strict") -> tuple[str, int]:
        return codecs.charmap_decode(data, errors, table)

    def encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
        return codecs.charmap_encode(text, errors, encoding_map)

    return codecs.CodecInfo(encode, decode, name=CODEC_PREFIX + name)  # type: ignore[arg-type]  # typeshed: decode takes bytes-like


def _search(name: str) -> codecs.CodecInfo | None:
    """Python's codec registry asks this for every name it does not know."""
    if not name.startswith(CODEC_PREFIX):
        return None
    charset = name[len(CODEC_PREFIX):]
    if charset in SINGLE_BYTE:
        return _single_byte_codec(charset)
    if charset in MULTI_BYTE_EXTRAS:
        return _multi_byte_codec(charset)
    return None


codecs.register(_search)
