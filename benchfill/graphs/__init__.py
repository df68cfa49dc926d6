"""The fill's search: the LangGraph graph (fill.py), its policies and the run around it."""
