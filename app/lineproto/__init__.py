"""OpenTSDB's line protocol (the "telnet" RPCs: ``put``, ``version``, ``help``, ``exit``, ...).

The server (``app/server``) frames a connection into lines and hands them here in blocks;
this package parses and executes them. It never touches sockets.
"""
