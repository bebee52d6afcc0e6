"""``quire top``: each stage's queue, work and failures, read from the
services' Prometheus ``/metrics`` addresses and redrawn every second.

``endpoints`` says where to scrape, ``scrape`` reads the expositions,
``model`` turns two scrapes into figures (gauges now, counters as rates) and
``view`` draws them with ``rich``. Nothing here imports a service: ``quire
top`` works the same against the embedded stack and port-forwarded pods.
"""
