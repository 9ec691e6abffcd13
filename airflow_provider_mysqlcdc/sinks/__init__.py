"""Sinks: where captured rows land. ``base.Sink`` is the interface; ``delta.DeltaSink`` the default."""
