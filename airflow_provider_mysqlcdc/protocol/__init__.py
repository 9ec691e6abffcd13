"""The pipeline's protocol: every record that crosses a process boundary, typed and versioned.

A pipeline runs in many processes that meet only through files and XCom: Airflow tasks (plan,
chunk, collect, stream), Spark drivers and executors, ``bin/status``, and the same processes after
an upgrade. What they exchange is defined here, once:

- ``envelope.py``: the ``record`` / ``format_version`` envelope; a newer version is refused with
  the fix, files from before the envelope read as version 0.
- ``offsets.py``: ``StreamOffset``, the stream's Spark offset (binlog offset with its server
  identity, and the registry generation).
- what the state location holds, by subject: ``registry.py`` (generations, drift, remembered
  schemas), ``progress.py`` (the stream's progress and history, its checkpoint identity, a DAG
  run's progress, staged files released), ``lease.py`` (the stream lease, its heartbeat, a stop
  request), ``servers.py`` (the servers followed through failovers).
- ``jobs.py``: the job files a task hands a Spark job (chunk job, stream job).
- ``results.py``: what jobs and tasks hand back through XCom: a chunk's result (to the collect
  task), what collect landed, what a stream run did.
- ``plans.py``: what a plan task decided per table (XCom to the collect task).
- ``actions.py``: the closed vocabularies (plan actions, startup and stream modes).

Binlog offsets (``cdc/model/offset.py``) and finished splits (``cdc/model/split.py``) are the core's
own records; they travel inside these.
"""
