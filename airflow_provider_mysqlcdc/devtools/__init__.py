"""Development tools: a throwaway MariaDB server, random write workloads and the demo.

These ship with the package because the demo (the README's main command) uses them, but nothing in
the CDC core or the Airflow glue imports them.
"""
