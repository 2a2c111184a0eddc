"""LightGBM prediction calls without the Python wrapper's per-call work.

``Booster.predict`` builds an inner predictor object, queries the booster's iteration and
output size in separate C calls and converts its input before it predicts: about 10 us a
call, as much as predicting the dozen rows the control plane sends per scheduler event.
:class:`BoosterCall` makes only the C calls that do the work, with the arguments
``Booster.predict(x, num_threads=1)`` passes, so the numbers are the same:

* a few rows go through LightGBM's prepared single-row predictor
  (``LGBM_BoosterPredictForMatSingleRowFast``), set up once. A batched call parses its
  parameters and builds a predictor on every call; between scheduler events, with the
  CPU caches cold, that set-up costs more than predicting ~15 rows one by one;
* larger batches make one ``LGBM_BoosterPredictForMat`` call.

It goes through ``lightgbm.basic._LIB``, the library handle the wrapper itself uses; a
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
    """``booster.predict(x, num_threads=1)`` for a 2-D float array, in as few C calls as pay."""

    PARAMS = "num_threads=1"
    #: Batches up to this many rows are predicted row by row (see the module docstring).
    ROW_BY_ROW_MAX = 16

    def __init__(self, booster: lgb.Booster):
        self.booster = booster
        self._params = ctypes.c_char_p(self.PARAMS.encode())
        self._n_features = booster.num_feature()
        self._fast: ctypes.c_void_p | None = None
        self._fast_iteration: int | None = None
        try:
            from lightgbm import basic

            self._lib = basic._LIB
            self._error = basic.LightGBMError
            self._batch_fn = self._lib.LGBM_BoosterPredictForMat
            self._row_fn = self._lib.LGBM_BoosterPredictForMatSingleRowFast
        except (ImportError, AttributeError):
            self._lib = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if self._lib is None or x.ndim != 2:
            return self.booster.predict(x, num_threads=1)
        n, f = x.shape
        # num_iteration as Booster.predict picks it by default: the best iteration
        # (<= 0, i.e. every tree, for a booster without early stopping).
        iteration = self.booster.best_iteration
        if n <= self.ROW_BY_ROW_MAX and f == self._n_features:
            return self._row_by_row(x, iteration)
        out = np.empty(n, dtype=np.float64)
        out_len = ctypes.c_int64(0)
        self._check(
            self._batch_fn(
                self.booster._handle,
                ctypes.c_void_p(x.ctypes.data),
                ctypes.c_int(_DTYPE_FLOAT64),
                ctypes.c_int32(n),
                ctypes.c_int32(f),
                ctypes.c_int(_ROW_MAJOR),
                ctypes.c_int(_PREDICT_NORMAL),
                ctypes.c_int(0),
                ctypes.c_int(iteration),
                self._params,
                ctypes.byref(out_len),
                ctypes.c_void_p(out.ctypes.data),
            )
        )
        if out_len.value != n:
            raise RuntimeError(f"LightGBM returned {out_len.value} predictions for {n} rows: a multi-output booster?")
        return out

    def _row_by_row(self, x: np.ndarray, iteration: int) -> np.ndarray:
        fast = self._fast_config(iteration)
        n, f = x.shape
        out = np.empty(n, dtype=np.float64)
        out_len = ctypes.c_int64(0)
        row, dst, row_bytes = x.ctypes.data, out.ctypes.data, 8 * f
        for _ in range(n):
            self._check(self._row_fn(fast, ctypes.c_void_p(row), ctypes.byref(out_len), ctypes.c_void_p(dst)))
            row += row_bytes
            dst += 8
        return out

    def _fast_config(self, iteration: int) -> ctypes.c_void_p:
        """The prepared single-row predictor, set up again only if the iteration changed."""
        if self._fast is None or iteration != self._fast_iteration:
            self._free_fast()
            fast = ctypes.c_void_p()
            self._check(
                self._lib.LGBM_BoosterPredictForMatSingleRowFastInit(
                    self.booster._handle,
                    ctypes.c_int(_PREDICT_NORMAL),
                    ctypes.c_int(0),
                    ctypes.c_int(iteration),
                    ctypes.c_int(_DTYPE_FLOAT64),
                    ctypes.c_int32(self._n_features),
                    self._params,
                    ctypes.byref(fast),
                )
            )
            self._fast, self._fast_iteration = fast, iteration
        return self._fast

    def _check(self, ret: int) -> None:
        if ret != 0:
            raise self._error(self._lib.LGBM_GetLastError().decode("utf-8"))

    def _free_fast(self) -> None:
        fast = getattr(self, "_fast", None)
        if fast is not None and self._lib is not None:
            self._lib.LGBM_FastConfigFree(fast)
        self._fast = None

    def __del__(self) -> None:
        self._free_fast()

    # C handles do not pickle: a copy sets itself up again from the booster.
    def __getstate__(self) -> dict:
        return {"booster": self.booster}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["booster"])
