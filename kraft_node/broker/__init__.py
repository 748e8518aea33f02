"""The broker: its lifecycle and its client RPCs (empty until the broker issues; see README.md)."""
