"""The benchmarks' tables: a TPC-DS ``customer``-shaped one (18 columns), and any other shape
(``fresh_table``), generated inside the server (fast)."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from devtools.throwaway_server import ThrowawayMariaDB

CUSTOMER_DDL = """
CREATE TABLE {name} (
  c_customer_sk INT NOT NULL PRIMARY KEY,
  c_customer_id CHAR(16) NOT NULL,
  c_current_cdemo_sk INT,
  c_current_hdemo_sk INT,
  c_current_addr_sk INT,
  c_first_shipto_date_sk INT,
  c_first_sales_date_sk INT,
  c_salutation CHAR(10),
  c_first_name CHAR(20),
  c_last_name CHAR(30),
  c_preferred_cust_flag CHAR(1),
  c_birth_day INT,
  c_birth_month INT,
  c_birth_year INT,
  c_birth_country VARCHAR(20),
  c_login CHAR(13),
  c_email_address CHAR(50),
  c_last_review_date_sk INT
) ENGINE=InnoDB
"""

_FILL = """
INSERT INTO {name}
SELECT seq,
       CONCAT('AAAAAAAA', LPAD(HEX(seq), 8, '0')),
       seq % 1920800, seq % 7200, seq % 1000000, 2449000 + seq % 3000, 2449000 + seq % 3100,
       ELT(1 + seq % 6, 'Mr.', 'Mrs.', 'Ms.', 'Dr.', 'Sir', 'Miss'),
       ELT(1 + seq % 5, 'James', 'Mary', 'Robert', 'Patricia', 'John'),
       ELT(1 + seq % 5, 'Smith', 'Johnson', 'Williams', 'Brown', 'Jones'),
       IF(seq % 2, 'Y', 'N'), 1 + seq % 28, 1 + seq % 12, 1924 + seq % 70,
       ELT(1 + seq % 4, 'UNITED STATES', 'GERMANY', 'JAPAN', 'BRAZIL'),
       NULL,
       CONCAT('user', seq, '@example.org'),
       IF(seq % 10 = 0, NULL, 2452000 + seq % 600)
FROM `{database}`.seq_{first}_to_{last}
"""


def create_customer_table(conn, table: TableId, rows: int, batch: int = 250_000) -> None:
    """Create and fill it, without logging the rows to the binlog (a snapshot does not read it)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{table.database}`")
        cur.execute(f"DROP TABLE IF EXISTS {table.quoted}")
        cur.execute(CUSTOMER_DDL.format(name=table.quoted))
        for first in range(1, rows + 1, batch):
            add_customer_rows(cur, table, first, min(rows, first + batch - 1))
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 1")


def add_customer_rows(cur, table: TableId, first: int, last: int) -> None:
    """Insert the rows of keys ``first`` to ``last`` (a sequence table of the database supplies them)."""
    cur.execute(_FILL.format(name=table.quoted, database=table.database, first=first, last=last))


def fresh_table(server: ThrowawayMariaDB, table: TableId, columns: str, fill_select: str):
    """(Re)create a bench table and fill it from ``fill_select`` (over MariaDB's seq tables)."""
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table.quoted}")
        cur.execute(f"CREATE TABLE {table.quoted} ({columns})")
        cur.execute(f"INSERT INTO {table.quoted} {fill_select}")
    conn.commit()
    return conn


def update_burst(server: ThrowawayMariaDB, table: TableId, rows: int):
    """A narrow table of ``rows`` rows, then one UPDATE of every row: the connection and the binlog
    positions before and after the UPDATE."""
    from airflow_provider_mysqlcdc.cdc.source.server import current_offset

    conn = fresh_table(server, table, "id INT PRIMARY KEY, v INT, pad VARCHAR(100)",
                       f"SELECT seq, 0, REPEAT('x', 60) FROM bench.seq_1_to_{rows}")
    start = current_offset(conn)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table.quoted} SET v = v + 1")
    conn.commit()
    return conn, start, current_offset(conn)
