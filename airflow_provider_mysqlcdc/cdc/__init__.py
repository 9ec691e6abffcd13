"""The CDC core: Flink CDC 2.x's lock-free chunked snapshot and finished-split binlog filter.

It imports neither Airflow nor Spark, so that Spark executors and plain Python can use it.

  model/      offsets, splits, change records (plain data, JSON round-trip)
  source/     connecting, server flavour, table schemas, preflight checks
  planning/   cutting a table into splits (the splitter)
  reading/    reading one split between its low and high watermark (the split reader)
  binlog/     the binlog reader and the finished-split filter
  records/    value normalisation, key ordering and applying records to a keyed state
"""
