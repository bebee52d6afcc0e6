"""The ``quire`` command (``quire.cli.main``)."""
