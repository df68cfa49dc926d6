"""The BenchFill graph for LangGraph's tools (``langgraph.json`` -> ``langgraph dev``, LangGraph Studio): a compiled
graph at module level, without a checkpointer (LangGraph's server brings its own persistence and refuses a graph
compiled with a custom one). ``benchfill fill`` compiles the same graph with its async SQLite checkpointer
(:func:`benchfill.graphs.fill.search`). A run needs the run's :class:`benchfill.graphs.fill.FillContext` as
its ``context``."""

from benchfill.graphs.fill import studio_graph

graph = studio_graph()
