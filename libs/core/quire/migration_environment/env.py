"""Alembic's entry point for every service's chain (``quire.migrations``)."""

from alembic import context

from quire.migrations import run_environment

run_environment(context)
