"""One LightGBM prediction call without the Python wrapper's per-call work.

``Booster.predict`` builds an inner predictor object, queries the booster's iteration and
output size in separate C calls and converts its input before it predicts: about 10 us a
call, as much as predicting the dozen rows the control plane sends per scheduler event.
:class:`BoosterCall` makes the one C call that does the work, ``LGBM_BoosterPredictForMat``,
with the arguments ``Booster.predict(x, num_threads=1)`` passes, so the numbers are the
same. It goes through ``lightgbm.basic._LIB``, the handle the wrapper itself uses; a
LightGBM without it falls back to ``Booster.predict``.
"""
from __future__ import annotations

import ctypes

import lightgbm as lgb
import numpy as np

# Constants of LightGBM's C API (c_api.h).
_DTYPE_FLOAT64 = 1
_ROW_MAJOR = 1
_PREDICT_NORMAL = 0


class BoosterCall:
    """``booster.predict(x, num_threads=1)`` for a 2-D float array, as one C call."""

    PARAMS = "num_threads=1"

    def __init__(self, booster: lgb.Booster):
        self.booster = booster
        try:
            from lightgbm import basic
            self._fn = basic._LIB.LGBM_BoosterPredictForMat
            self._error = basic.LightGBMError
            self._last_error = basic._LIB.LGBM_GetLastError
        except (ImportError, AttributeError):
            self._fn = None
        self._params = ctypes.c_char_p(self.PARAMS.encode())

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if self._fn is None or x.ndim != 2:
            return self.booster.predict(x, num_threads=1)
        n, f = x.shape
        out = np.empty(n, dtype=np.float64)
        out_len = ctypes.c_int64(0)
        # num_iteration as Booster.predict picks it by default: the best iteration
        # (<= 0, i.e. every tree, for a booster without early stopping).
        ret = self._fn(
            self.booster._handle, ctypes.c_void_p(x.ctypes.data), ctypes.c_int(_DTYPE_FLOAT64),
            ctypes.c_int32(n), ctypes.c_int32(f), ctypes.c_int(_ROW_MAJOR), ctypes.c_int(_PREDICT_NORMAL),
            ctypes.c_int(0), ctypes.c_int(self.booster.best_iteration), self._params,
            ctypes.byref(out_len), ctypes.c_void_p(out.ctypes.data),
        )
        if ret != 0:
            raise self._error(self._last_error().decode("utf-8"))
        if out_len.value != n:
            raise RuntimeError(f"LightGBM returned {out_len.value} predictions for {n} rows: a multi-output booster?")
        return out
