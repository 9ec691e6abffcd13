"""The durable state of a pipeline: which tables are captured, with which finished splits, as a
sequence of immutable generations (registry.py) on a local path or object storage (storage.py)."""
