"""Spans a tracing backend already stores, read as the calls the live path records (``groundlens traces``)."""
