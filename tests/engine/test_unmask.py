import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dilaserve.engine import select_commits

blocks = st.integers(1, 32).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0, 1, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.booleans(), min_size=n, max_size=n),
        st.floats(0.01, 1.0),
    )
)


@settings(max_examples=200, deadline=None)
@given(blocks)
def test_unmask_rule(args):
    conf, masked, thr = np.array(args[0]), np.array(args[1]), args[2]
    pick = select_commits(conf, masked, thr)
    if not masked.any():
        assert pick.size == 0
        return
    assert pick.size >= 1, "every step commits at least one token"
    assert masked[pick].all(), "only masked positions are committed"
    assert len(set(pick.tolist())) == pick.size
    above = np.flatnonzero(masked & (conf >= thr))
    if above.size:
        assert sorted(pick.tolist()) == above.tolist(), "exactly the confident masked tokens"
    else:
        assert pick.size == 1 and conf[pick[0]] == conf[masked].max(), "else the single most confident"


def test_lower_threshold_commits_superset():
    conf = np.array([0.95, 0.6, 0.55, 0.3, 0.92])
    masked = np.array([True, True, True, True, False])
    assert set(select_commits(conf, masked, 0.9)) == {0}
    assert set(select_commits(conf, masked, 0.5)) == {0, 1, 2}
    assert set(select_commits(conf, masked, np.inf)) == {0}
