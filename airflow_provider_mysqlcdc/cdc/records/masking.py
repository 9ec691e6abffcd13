"""A table's column rule applied to its rows, where they are read: the snapshot's SELECT and the
binlog's row images alike, so that a left-out or masked value never leaves the process that read it
(no Spark row, spill file, changelog image or log line holds it in clear).

- ``hash``: HMAC-SHA-256 keyed by the pipeline's salt, as 64 hex digits, of the value's normalised
  form (records/values.py): the bytes of binary data, the UTF-8 of text, the text of anything else
  (``2024-05-01 10:00:00``, ``12.50``). The same value hashes the same on both paths and in every
  run with the same salt, so hashed columns still join; NULL stays NULL.
- ``truncate:<n>``: the first n characters of text, the first n bytes of binary data.
- ``null``: NULL.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any, Literal

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import TableSchema

Mask = Callable[[Any], Any]


def hashed(value: Any, key: bytes) -> str | None:
    if value is None:
        return None
    data = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _truncated(length: int) -> Mask:
    def truncate(value: Any) -> Any:
        # a value of another type (a column a DDL changed) is not shown at all
        return value[:length] if isinstance(value, (str, bytes)) else None
    return truncate


def missing_salt_error(table: object) -> ConfigurationError:
    return ConfigurationError(
        f"The column rule of {table} hashes columns, which needs a salt: set the extra 'mask_salt' of the source "
        "connection (mysqlcdc) to a long random secret. It is read like the password, never from the DAG.")


class ColumnMasks:
    """One table's rule on its rows: columns it leaves out are dropped, masked ones masked. The key
    columns of ``schema`` are never touched (cdc/source/rules.py keeps them as they are)."""

    def __init__(self, schema: TableSchema, salt: str):
        assert schema.table_rule is not None
        self.rule: TableRule = schema.table_rule
        self.table_id = schema.table_id
        self.keys = frozenset(schema.key_columns)
        self._key = salt.encode("utf-8")
        #: per column name: its mask (None: kept as it is), or False: left out
        self._by_name: dict[str, Mask | None | Literal[False]] = {}
        for column in schema.columns:
            self._by_name[column.name] = self._mask(column.mask)

    @classmethod
    def of(cls, schema: TableSchema, salt: Callable[[], str]) -> "ColumnMasks | None":
        """The masks of ``schema``'s rule (None: no rule); ``salt`` is asked only if the rule hashes."""
        if schema.table_rule is None:
            return None
        return cls(schema, salt() if schema.table_rule.hashes else "")

    def _mask(self, mask: str | None) -> Mask | None:
        if mask is None:
            return None
        if mask == "hash":
            if not self._key:
                raise missing_salt_error(self.table_id)
            key = self._key
            return lambda value: hashed(value, key)
        if mask == "null":
            return lambda value: None
        return _truncated(int(mask.split(":", 1)[1]))

    def _of(self, name: str) -> Mask | None | Literal[False]:
        """A column of a row the schema does not describe (a DDL added it): by the rule's name lists."""
        found = self._by_name.get(name)
        if found is None and name not in self._by_name:
            if name in self.keys:
                found = None
            elif not self.rule.keeps(name):
                found = False
            else:
                found = self._mask(self.rule.mask_of(name))
            self._by_name[name] = found
        return found

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with the rule applied, in place (and returned)."""
        for name in list(row):
            mask = self._of(name)
            if mask is False:
                del row[name]
            elif mask is not None:
                row[name] = mask(row[name])
        return row
