"""The coordinator of a DAG run, apart from Airflow: what the plan task decides (``planner.py``: preflight,
each table's action, its splits and the chunks the snapshot tasks take) and how the run's results land
in the registry (``changes.py``). It reads the source through ``cdc/`` and the state through ``state/``;
the stream's rules are its sibling, ``stream/``."""
