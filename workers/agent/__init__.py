"""The node agent: a database-less Celery worker that runs on each GPU node.

It consumes only its own queue `node.<hostname>` and talks to the portal only through the
broker; it never receives database credentials.
"""
