"""The serving model: one asyncio gunicorn worker for HTTP and OpenTSDB's line protocol.

``worker.TsdWorker`` accepts connections, tells the two protocols apart by the first byte
(as OpenTSDB's ``PipelineFactory`` does), buffers each HTTP request completely before the
WSGI app sees it, and runs the app and the line-protocol session in bounded thread pools.
``gunicorn_conf`` holds the gunicorn settings; ``settings.ServerLimits`` the timeouts and caps.
See docs/serving.md.
"""
