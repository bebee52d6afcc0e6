"""The operator console: server-rendered pages under ``/console/`` in the
HTTP gateway, for operators and reviewers (``docs/guides/console.md``).

Every action is a plain HTML form, usable without JavaScript; every page is
asked of the services with the signed-in person's own token.
"""
