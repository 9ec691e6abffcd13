"""The example DAG, shipped in the package: point a DAGs folder at this directory, or copy the file."""
