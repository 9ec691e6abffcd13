"""The stream's rules, apart from Spark: what each item of a micro-batch (row changes, DDL, a purge
gap, a table failure, an activation, a staged split) does to the sink and to the pipeline's state.

The table docs/events-and-types.md ("Event -> what happens to the sink") describes lives here, in
plain Python over the ``Sink`` interface, the pipeline's state and the source's answers
(``tables.TableSource``), so unit tests cover every row of it without Spark or a server.
``spark/stream_job.py`` feeds a micro-batch's items in and runs the query around it; ``spark/
binlog_source.py`` produces them.

- ``events.py``: the items a batch carries besides row changes, and ``BatchItem``
- ``tables.py``: what the rules ask the source (schemas, defaults, the head) and its server-backed answer
- ``applier.py``: ``BatchApplier``, a batch's items applied in binlog order, unit by unit
- ``schema_changes.py``: the DDL and purge rules of the applier
- ``upkeep.py``: clustering and maintenance between batches
"""
