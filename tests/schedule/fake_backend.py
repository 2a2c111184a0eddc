"""An in-memory backend that only records what the scheduler asks of it."""

from __future__ import annotations

from dilaserve.cluster.base import Backend


class RecordingBackend(Backend):
    def __init__(self):
        self.launched, self.stopped, self.steps, self.migrations, self.released = [], [], [], [], []

    def bind(self, sink):
        self.sink = sink

    def launch_instance(self, spec):
        self.launched.append(spec)

    def stop_instance(self, instance_id):
        self.stopped.append(instance_id)

    def submit_step(self, instance_id, batch):
        self.steps.append((instance_id, list(batch)))

    def migrate(self, state, src, dst):
        state.drop_cache()  # as the Backend contract asks: the K/V stay behind
        self.migrations.append((state.request_id, src, dst))

    def release(self, instance_id, request_ids):
        self.released.append((instance_id, list(request_ids)))

    def last_batch(self, instance_id):
        return [b for iid, b in self.steps if iid == instance_id][-1]
