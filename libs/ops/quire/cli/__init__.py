"""The ``quire`` command."""
