"""The stream's rules, apart from Spark: what each item of a micro-batch (row changes, DDL, a purge
gap, a table failure, an activation, a staged split) does to the sink and to the pipeline's state.

The table docs/events-and-types.md ("Event -> what happens to the sink") describes lives here, in
plain Python over the ``Sink`` interface, the pipeline's state and the source's answers
(``tables.TableSource``), so unit tests cover every row of it without Spark or a server.
``batches.py`` plans a batch (its end, its reads) and ``reading.py`` reads them from the binlog (a
range, an activation), typing the row changes for the sink; ``spark/binlog_source.py`` runs those
reads on the executors and ``spark/stream_job.py``
feeds a micro-batch's items in and runs the query around it.

- ``events.py``: the items a batch carries besides row changes, and ``BatchItem``
- ``tables.py``: what the rules ask the source (schemas, defaults, the head) and its server-backed answer
- ``applier.py``: ``BatchApplier``, a batch's items applied in binlog order, unit by unit
- ``schema_changes.py``: the DDL and purge rules of the applier
- ``upkeep.py``: clustering and maintenance between batches
- ``batches.py``: ``BatchPlanner``, where a batch ends and the reads it is made of
- ``identity.py``: the stream's identity in its checkpoint folder, for either engine
- ``loop.py``: ``StreamLoop``, the batches run in the driver itself; ``BatchSteps``, what a batch does
  once its items are known
- ``reading.py``: ``BinlogReading``, a range's or an activation's items in binlog order, and
  ``ChangeTyping``, runs of changes typed into ``TableChanges`` (a table's failure in its place)
"""
