"""The CDC core: Flink CDC 2.x's lock-free chunked snapshot and finished-split binlog filter.

It imports neither Airflow nor Spark, so that Spark executors and plain Python can use it.

  model/      the vocabulary: table ids and schemas, offsets, splits, change records (plain data)
  source/     talking to the server: connecting, its flavour, reading schemas, preflight checks
  planning/   cutting a table into splits (the splitter)
  reading/    reading one split between its low and high watermark (the split reader)
  binlog/     the binlog reader and the finished-split filter
  records/    value normalisation, key ordering and applying records to a keyed state
"""
