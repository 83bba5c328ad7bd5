"""OpenTSDB 2.4's expression query (``/api/query/exp``): the JSON model and the expression
language, pure (no IO). The engine side is ``app.engine.expression``."""
