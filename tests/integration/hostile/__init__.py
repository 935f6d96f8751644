"""Hostile servers for the robustness tests (see ``harness`` and ``server``).

Kept empty: ``server.py`` runs as ``python -m tests.integration.hostile.server``, and whatever
this package imports, every hostile server process would import at start-up too.
"""
