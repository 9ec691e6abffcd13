"""The Delta Lake sink through delta-rs: the sink, its commits' data files, clustering, the SQL
predicates delta-rs evaluates, and maintenance. Nothing here is imported by the Iceberg sink."""
