"""gunicorn settings for pytsd: ``gunicorn --config gunicorn.conf.py wsgi:application``.

The settings live in the package (``app/server/gunicorn_conf.py``, see docs/serving.md); this
file stays because the Dockerfile and ``gunicorn`` runs from a checkout name it. The module is
run, not imported: gunicorn re-reads this file on SIGHUP, and a cached import would keep the
old environment.
"""

import runpy

globals().update({name: value for name, value in
                  runpy.run_module("app.server.gunicorn_conf").items()
                  if not name.startswith("_")})
