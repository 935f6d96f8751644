"""The server under test as veeksha sees it from outside: a managed server process (start,
ready, logs, stop, no orphans) and its Prometheus metrics (scraper, per-engine names).

See docs/server.md.
"""
