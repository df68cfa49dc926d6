"""The fill's run record (record.py: typed rows, status enums and transitions), its memory bank (bank.py: SQLite) and
its read model (views.py, trace.py: traces, the review queue, export)."""
