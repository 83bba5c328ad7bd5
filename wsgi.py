"""The WSGI entry point: ``gunicorn wsgi:application`` (the same object as ``app.wsgi``)."""

from app.wsgi import application

__all__ = ["application"]
