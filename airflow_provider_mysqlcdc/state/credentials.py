"""Credentials for a lake and a state location on an object store (``s3://``, ``gs://``, ``abfss://``).

Two libraries touch those locations: fsspec (s3fs, gcsfs, adlfs: the state location, report
folders, spill files) and delta-rs (the Delta tables). Both read the same well-known environment
variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``...), so credentials
are installed into the environment of each process that needs them, and nothing else has to carry
them: no storage options through every call, nothing in a job file, a Spark conf or an argument.

They reach a Spark program in the private credentials file its task writes (the source's password
travels there too: launch/submit.py), and the program installs them on its driver and wherever an
executor reads that file. ``repr`` never shows them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import read_private_file
from airflow_provider_mysqlcdc.protocol.sinks import CATALOG_VARIABLE

#: the key of the private credentials file that holds them (the rest is the source's settings)
PRIVATE_FILE_KEY = "object_store"

#: what an AWS connection's extras may hold, and the variable each one becomes
_AWS_EXTRAS = {"aws_session_token": "AWS_SESSION_TOKEN", "region_name": "AWS_REGION",
               "endpoint_url": "AWS_ENDPOINT_URL"}


@dataclass(frozen=True)
class ObjectStoreCredentials:
    """Environment variables that open the object store to fsspec and delta-rs alike."""

    variables: dict[str, str] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return bool(self.variables)

    @classmethod
    def from_aws_connection(cls, *, conn_id: str, login: str | None, password: str | None,
                            extra: Mapping[str, Any]) -> "ObjectStoreCredentials":
        """An Airflow ``aws`` connection as Amazon's provider defines it: access key id as login, secret
        key as password; ``region_name``, ``endpoint_url`` (an S3-compatible server) and
        ``aws_session_token`` in its extras. No login: the machine's own AWS credentials apply (an
        instance profile, ``AWS_*`` variables), and only the extras are installed."""
        if bool(login) != bool(password):
            raise ConfigurationError(f"Connection {conn_id!r} has {'a login' if login else 'a password'} but no "
                                     f"{'password' if login else 'login'}: give both (access key id as login, "
                                     "secret access key as password) or neither (the machine's own credentials).")
        variables: dict[str, str] = {"AWS_ACCESS_KEY_ID": login, "AWS_SECRET_ACCESS_KEY": password or ""} if login else {}
        nested = extra.get("service_config", {}).get("s3", {}) if isinstance(extra.get("service_config"), dict) else {}
        for name, variable in _AWS_EXTRAS.items():
            value = nested.get(name) or extra.get(name)
            if value:
                variables[variable] = str(value)
        if "AWS_REGION" in variables:
            variables["AWS_DEFAULT_REGION"] = variables["AWS_REGION"]  # botocore's name for it
        if variables.get("AWS_ENDPOINT_URL", "").startswith("http://"):
            variables["AWS_ALLOW_HTTP"] = "true"  # delta-rs refuses a plain-HTTP endpoint otherwise
        return cls(variables)

    def with_catalog(self, properties: dict[str, str]) -> "ObjectStoreCredentials":
        """These and the Iceberg catalog's properties (sinks/iceberg/catalog.py reads them where the
        sink is opened), which may hold the catalog's own credentials."""
        return ObjectStoreCredentials({**self.variables, CATALOG_VARIABLE: json.dumps(properties)})

    def fsspec_options(self, url: str) -> dict[str, Any]:
        """fsspec options that carry these credentials for ``url`` explicitly, where installing them
        would not do: a process that watches pipelines of other credentials too (the triggerer).
        S3 only; other stores read their variables from the environment."""
        if not self or not url.lower().startswith(("s3://", "s3a://")):
            return {}
        found = self.variables.get
        options: dict[str, Any] = {}
        if found("AWS_ACCESS_KEY_ID"):
            options.update(key=found("AWS_ACCESS_KEY_ID"), secret=found("AWS_SECRET_ACCESS_KEY"))
        if found("AWS_SESSION_TOKEN"):
            options["token"] = found("AWS_SESSION_TOKEN")
        client = {name: found(variable) for name, variable in (("endpoint_url", "AWS_ENDPOINT_URL"),
                                                               ("region_name", "AWS_REGION")) if found(variable)}
        if client:
            options["client_kwargs"] = client
        return options

    def install(self) -> None:
        """Make them this process's (and its children's) credentials for the object store."""
        os.environ.update(self.variables)

    def add_to_private_file(self, path: Path) -> None:
        """Put them into the private credentials file at ``path`` (written by SourceConfig.to_private_file)."""
        if self:
            put_in_private_file(path, PRIVATE_FILE_KEY, self.variables)

    @classmethod
    def from_private_file(cls, path: Path | str) -> "ObjectStoreCredentials":
        return cls(dict(read_private_file(path).get(PRIVATE_FILE_KEY) or {}))


def put_in_private_file(path: Path, key: str, value: Any) -> None:
    """Add ``key`` to the private credentials file at ``path`` (written by SourceConfig.to_private_file)."""
    data = json.loads(path.read_text())
    data[key] = value
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)


#: what the last ``install_from_private_file`` of this process installed: a Python worker of a shared
#: server (launch/local_server.py) runs the sessions of several pipelines one after another
_installed: set[str] = set()


def install_from_private_file(path: Path | str | None) -> None:
    """A Spark program's side: install what its task put in the private credentials file (if
    anything), without what an earlier task's file installed in this process and this one lacks."""
    if path:
        credentials = ObjectStoreCredentials.from_private_file(path)
        for name in _installed - set(credentials.variables):
            os.environ.pop(name, None)
        _installed.clear()
        _installed.update(credentials.variables)
        credentials.install()
