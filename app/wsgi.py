"""The WSGI application inside the package: ``gunicorn app.wsgi:application`` works from any folder.

The top-level ``wsgi.py`` re-exports it for ``gunicorn wsgi:application`` run from a checkout.
"""

from app import create_app

application = create_app()
