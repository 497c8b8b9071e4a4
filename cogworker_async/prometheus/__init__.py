"""Prometheus metrics (the ``metrics`` extra): the only package that imports
``prometheus_client``.

Two kinds of metrics, from two kinds of places, so that nothing is counted N times:

- ``process``: what one worker process did and is doing (runs by outcome, run time,
  wait, recoveries, busy slots, loop lag), served by that worker on ``metrics_port``.
  Summed over processes by the monitoring stack.
- ``system``: what is in Redis (queue sizes and latency, the scheduled, retry and dead
  sets, live processes), the same whichever process reads it: served by **one** reader,
  the dashboard's ``/metrics`` or the ``cogworker-async metrics`` exporter
  (``exporter``), never by every worker.

``server`` is the small threaded HTTP server both the worker and the exporter use.

This ``__init__`` imports nothing, so that the CLI can register the exporter command
without the extra installed (the command says what to install when it runs).
"""
