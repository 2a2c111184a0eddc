"""The control plane is built in one place for serving and simulation."""

from dilaserve.cluster.base import InstanceReady, InstanceSpec
from dilaserve.control import ControlConfig
from dilaserve.predict.base import OneShotPredictor
from dilaserve.reconfig.config import ClusterConfig, ReconfigConfig
from dilaserve.schedule.control_plane import ControlPlaneSpec, build_control_plane
from tests.control.builders import default_profile
from tests.schedule.fake_backend import RecordingBackend

ACCURACY = {0.5: 0.15, 0.6: 0.58, 0.7: 0.72, 0.8: 0.84, 0.9: 0.92}


def spec(**kw):
    return ControlPlaneSpec(default_profile(), ControlConfig(), ClusterConfig(nodes=1, gpus_per_node=4), **kw)


def test_the_policy_and_the_spec_both_decide_on_reconfiguration():
    pred = OneShotPredictor({t: 0.5 for t in ACCURACY})
    on = build_control_plane(RecordingBackend(), "dilaserve", spec(reconfig=ReconfigConfig()), pred)
    assert on.reconfigurator is not None
    assert build_control_plane(RecordingBackend(), "dilaserve", spec(), pred).reconfigurator is None
    assert (
        build_control_plane(
            RecordingBackend(), "dilaserve-no-reconfig", spec(reconfig=ReconfigConfig()), pred
        ).reconfigurator
        is None
    )


def test_the_spec_accuracies_reach_the_quality_budget_and_fixed_policies_need_no_predictor():
    pred = OneShotPredictor({t: 0.5 for t in ACCURACY})
    sched = build_control_plane(RecordingBackend(), "dilaserve", spec(accuracy=ACCURACY), pred)
    assert sched.controller.budget_mask.tolist() == [False, False, False, True, True]
    paper = build_control_plane(RecordingBackend(), "dilaserve-paper", spec(accuracy=ACCURACY), pred)
    assert paper.controller.budget_mask.all()
    fixed = build_control_plane(RecordingBackend(), "fixed@0.7", spec(), predictor=None)
    assert fixed.controller.predictions is None and fixed.controller.config.fixed_threshold == 0.7


def test_the_factory_binds_the_scheduler_to_the_backends_events():
    be = RecordingBackend()
    sched = build_control_plane(be, "fixed@0.7", spec())
    assert be.sink == sched.handle
    sched.start([InstanceSpec("a", 1, 0, (0,), 1000)])
    be.sink(InstanceReady(0.0, "a"))  # the backend's report reaches the scheduler
    assert sched.pool.ready[sched.pool.slot_of["a"]]
