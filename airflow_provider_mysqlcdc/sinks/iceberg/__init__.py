"""The Apache Iceberg sink through pyiceberg: the sink, its catalog, what its commits record, its
columns, which rows a write replaces, and maintenance. Nothing here is imported by the Delta sink."""
