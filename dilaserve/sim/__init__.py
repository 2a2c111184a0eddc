"""Discrete-event cluster simulator.

Modules: ``workload``/``traces``/``arrivals``/``lengths`` (what arrives), ``progress``
(what a step does, drawn from :mod:`dilaserve.predict.replay`), ``loop`` (the clock),
``backend`` (:class:`~dilaserve.sim.backend.SimBackend`, the simulated instances),
``simulator`` (the real control plane over that backend), ``slo``, ``capacity``,
``metrics`` and ``telemetry`` (what is measured). Import from the modules directly; this
package file stays empty, so importing one module does not import the rest.
"""
