"""Span sources that need a vendor SDK, found by ``groundlens traces`` through entry points."""
