"""The fill's memory bank (SQLite) and its read model: traces, the review queue, export."""
