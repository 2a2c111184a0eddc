"""Discrete-event cluster simulator.

Modules: ``workload``/``traces``/``arrivals``/``lengths`` (what arrives), ``replay`` and
``progress`` (what a step does), ``loop`` (the clock), ``simulator`` (the real control plane
over :class:`dilaserve.cluster.sim_backend.SimBackend`), ``slo``, ``capacity``, ``metrics``
and ``telemetry`` (what is measured). Import from the modules directly; this package file
stays empty so that ``dilaserve.cluster.sim_backend`` and ``dilaserve.sim`` can import each
other's modules without a cycle.
"""
