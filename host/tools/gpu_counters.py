"""The GPU's own counters for each kernel launch: CUPTI's Range Profiler, called through ``ctypes``.

:func:`measure` runs a callable on the current CUDA context with every kernel launch profiled as a range of its
own (CUPTI's auto range, kernel replay: CUPTI replays a launch once per pass the metrics need, restoring the memory
it writes), and returns one :class:`LaunchCounters` per launch. :data:`COALESCING_METRICS` are the global-memory
sectors and requests of loads, stores, atomics with a result (``atom``) and reductions (``red``): what the
coalescing analyzer (:mod:`.coalescing`) predicts, and what Nsight Compute reports under the same names.

The parameter structures below are those of CUPTI 13.0's headers, field for field (a later CUPTI appends fields
and tells the versions apart by ``structSize``); ``tests/test_gpu_counters.py`` compiles their layout against the
installed headers.

Why ``ctypes`` and not the ``cupti-python`` bindings: those (13.4) expose the profiler host (metric configuration
and evaluation) and PM sampling, but not the Range Profiler, which gives exact counts per launch; and a wheel of
Python bindings put beside numba-cuda may shadow the ``cuda-bindings`` it uses. CUPTI itself comes as a shared
library in the ``nvidia-cuda-cupti`` wheel (the ``counters`` extra): CUPTI 13.0 runs on a CUDA 13.0 driver
(580); a newer CUPTI may need a newer driver for the target side.

The host side (:class:`MetricConfig`: which metrics a chip has, the configuration image, the number of passes)
needs no GPU; :func:`measure` needs one, and on many systems the right to read its counters
(``NVreg_RestrictProfilingToAdminUsers=0``, or root): :class:`CountersUnavailable` says which is missing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

COALESCING_METRICS = tuple(f"l1tex__t_{what}_pipe_lsu_mem_global_op_{op}.sum"
                           for op in ("ld", "st", "atom", "red") for what in ("sectors", "requests"))
"""Global-memory sectors (32 bytes) and requests (one per warp-level instruction) of each access kind."""

LIBRARY_ENV = "SIMT_PTO_CUPTI"
"""An environment variable that names the CUPTI library to load (a path), ahead of every place searched."""

_RANGE_PROFILER, _AUTO_RANGE, _KERNEL_REPLAY = 0, 1, 2  # CUpti_ProfilerType, CUpti_ProfilerRange, ReplayMode
_INSUFFICIENT_PRIVILEGES = 35


class CountersUnavailable(RuntimeError):
    """The counters cannot be read here; the message says why (no CUPTI library, no GPU, no permission)."""


class CuptiError(RuntimeError):
    """A CUPTI call failed: its name, status and CUPTI's own words."""


class UnknownMetric(CuptiError):
    """A metric the chip does not have (or CUPTI does not know), named."""


# -- the library ------------------------------------------------------------------------------------------------

def library_candidates() -> list[str]:
    """Where CUPTI is looked for, in order: :data:`LIBRARY_ENV`; the ``nvidia`` wheels on ``sys.path`` (CUDA 13's
    ``nvidia/cu13/lib``, CUDA 12's ``nvidia/cuda_cupti/lib``, also what PyTorch's CUDA wheels install); the
    CUDA toolkit (``$CUDA_HOME``, ``/usr/local/cuda``); the loader's own search."""
    found = [os.environ[LIBRARY_ENV]] if os.environ.get(LIBRARY_ENV) else []
    try:
        import nvidia  # a namespace package: the NVIDIA CUDA wheels
        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    for root in roots:
        for pattern in ("cu13/lib/libcupti.so*", "cuda_cupti/lib/libcupti.so*"):
            found += sorted(glob.glob(os.path.join(root, pattern)), reverse=True)
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            found += sorted(glob.glob(os.path.join(home, "extras/CUPTI/lib64/libcupti.so*")), reverse=True)
    system = ctypes.util.find_library("cupti")
    if system:
        found.append(system)
    return list(dict.fromkeys(found))


_LIBRARY: list = []


def library() -> ctypes.CDLL:
    """The CUPTI library (loaded once), or :class:`CountersUnavailable` naming where it was looked for."""
    if _LIBRARY:
        return _LIBRARY[0]
    tried = []
    for path in library_candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            tried.append(f"{path} ({exc})")
            continue
        _declare(lib)
        _LIBRARY.append(lib)
        return lib
    raise CountersUnavailable("no CUPTI library could be loaded: install the counters extra "
                              "(pip install \"simt_pto[counters]\", the nvidia-cuda-cupti wheel) or name the library "
                              f"in ${LIBRARY_ENV}" + (f"; tried: {'; '.join(tried)}" if tried else ""))


def _declare(lib: ctypes.CDLL) -> None:
    lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuptiGetResultString.restype = ctypes.c_int


def _call(lib: ctypes.CDLL, name: str, params: ctypes.Structure) -> None:
    status = getattr(lib, name)(ctypes.byref(params))
    if status:
        text = ctypes.c_char_p()
        lib.cuptiGetResultString(status, ctypes.byref(text))
        words = text.value.decode() if text.value else "?"
        if status == _INSUFFICIENT_PRIVILEGES:
            raise CountersUnavailable(f"{name}: {words}: reading the GPU's counters needs root or the driver "
                                      "option NVreg_RestrictProfilingToAdminUsers=0")
        raise CuptiError(f"{name} failed with status {status}: {words}")


def _params(*fields: tuple[str, object]) -> type[ctypes.Structure]:
    """A CUPTI parameter struct: ``structSize`` and ``pPriv``, then ``fields``; its :meth:`new` sets
    ``structSize`` as CUPTI's ``*_STRUCT_SIZE`` macros do (up to the end of the last field, no tail padding)."""
    class Params(ctypes.Structure):
        _fields_ = [("structSize", ctypes.c_size_t), ("pPriv", ctypes.c_void_p), *fields]

        @classmethod
        def new(cls, **values):
            name, kind = cls._fields_[-1]
            return cls(structSize=getattr(cls, name).offset + ctypes.sizeof(kind), **values)
    return Params


_p, _size, _u8, _u16, _u32, _int = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint8, ctypes.c_uint16,
                                     ctypes.c_uint32, ctypes.c_int)
_names = ctypes.POINTER(ctypes.c_char_p)
# cupti_profiler_host.h
_HostInitialize = _params(("profilerType", _int), ("pChipName", ctypes.c_char_p),
                          ("pCounterAvailabilityImage", _p), ("pHostObject", _p))
_HostDeinitialize = _params(("pHostObject", _p))
_HostSupportedChips = _params(("numChips", _size), ("ppChipNames", _names))
_HostAddMetrics = _params(("pHostObject", _p), ("ppMetricNames", _names), ("numMetrics", _size))
_HostConfigSize = _params(("pHostObject", _p), ("configImageSize", _size))
_HostConfig = _params(("pHostObject", _p), ("configImageSize", _size), ("pConfigImage", _p))
_HostPasses = _params(("configImageSize", _size), ("pConfigImage", _p), ("numOfPasses", _size))
_HostEvaluate = _params(("pHostObject", _p), ("pCounterDataImage", _p), ("counterDataImageSize", _size),
                        ("rangeIndex", _size), ("ppMetricNames", _names), ("numMetrics", _size),
                        ("pMetricValues", ctypes.POINTER(ctypes.c_double)))
# cupti_profiler_target.h, cupti_target.h
_Initialize = _params()
_DeInitialize = _params()
_ChipName = _params(("deviceIndex", _size), ("pChipName", ctypes.c_char_p))
_Availability = _params(("ctx", _p), ("counterAvailabilityImageSize", _size), ("pCounterAvailabilityImage", _p))
# cupti_range_profiler.h
_Enable = _params(("ctx", _p), ("pRangeProfilerObject", _p))
_Object = _params(("pRangeProfilerObject", _p))  # Disable, Start
_SetConfig = _params(("pRangeProfilerObject", _p), ("configSize", _size), ("pConfig", _p),
                     ("counterDataImageSize", _size), ("pCounterDataImage", _p), ("range", _int),
                     ("replayMode", _int), ("maxRangesPerPass", _size), ("numNestingLevels", _u16),
                     ("minNestingLevel", _u16), ("passIndex", _size), ("targetNestingLevel", _u16))
_Stop = _params(("pRangeProfilerObject", _p), ("passIndex", _size), ("targetNestingLevel", _size),
                ("isAllPassSubmitted", _u8))
_Decode = _params(("pRangeProfilerObject", _p), ("numOfRangeDropped", _size))
_DataSize = _params(("pRangeProfilerObject", _p), ("pMetricNames", _names), ("numMetrics", _size),
                    ("maxNumOfRanges", _size), ("maxNumRangeTreeNodes", _u32), ("counterDataSize", _size))
_DataInit = _params(("pRangeProfilerObject", _p), ("counterDataSize", _size), ("pCounterData", _p))
_DataInfo = _params(("pCounterDataImage", _p), ("counterDataImageSize", _size), ("numTotalRanges", _size))
_RangeInfo = _params(("pCounterDataImage", _p), ("counterDataImageSize", _size), ("rangeIndex", _size),
                     ("rangeDelimiter", ctypes.c_char_p), ("rangeName", ctypes.c_char_p))


def _name_array(names: Sequence[str]):
    return (ctypes.c_char_p * len(names))(*[n.encode() for n in names])


def supported_chips() -> list[str]:
    """The chips this CUPTI knows (``"GA100"``, ``"GH100"``, ...): no GPU needed."""
    lib = library()
    params = _HostSupportedChips.new()
    _call(lib, "cuptiProfilerHostGetSupportedChips", params)
    return [params.ppChipNames[i].decode() for i in range(params.numChips)]


# -- the host side: a metric configuration --------------------------------------------------------------------

class MetricConfig:
    """CUPTI's profiler host object for ``metrics`` on ``chip``: the configuration image the GPU is set up with,
    its number of replay passes, and the evaluation of collected counter data into metric values. Needs no GPU.
    ``availability``: the GPU's counter availability image (None on the host alone). A metric the chip does not
    have is refused with a :class:`CuptiError` naming it."""

    def __init__(self, chip: str, metrics: Sequence[str] = COALESCING_METRICS, availability=None):
        self.lib, self.chip, self.metrics = library(), chip, tuple(metrics)
        init = _HostInitialize.new(profilerType=_RANGE_PROFILER, pChipName=chip.encode(),
                                   pCounterAvailabilityImage=None if availability is None else
                                   ctypes.cast(availability, _p))
        try:
            _call(self.lib, "cuptiProfilerHostInitialize", init)
        except CuptiError as exc:
            raise CuptiError(f"{exc} (chip {chip!r}; this CUPTI knows {', '.join(supported_chips())})") from None
        self._host = init.pHostObject
        try:
            self._add(self.metrics)
            size = _HostConfigSize.new(pHostObject=self._host)
            _call(self.lib, "cuptiProfilerHostGetConfigImageSize", size)
            self.image = (ctypes.c_uint8 * size.configImageSize)()
            _call(self.lib, "cuptiProfilerHostGetConfigImage",
                  _HostConfig.new(pHostObject=self._host, configImageSize=size.configImageSize,
                                  pConfigImage=ctypes.cast(self.image, _p)))
            passes = _HostPasses.new(configImageSize=len(self.image), pConfigImage=ctypes.cast(self.image, _p))
            _call(self.lib, "cuptiProfilerHostGetNumOfPasses", passes)
            self.passes = int(passes.numOfPasses)
        except UnknownMetric:
            self.close()
            raise
        except CuptiError as exc:
            self.close()
            raise CuptiError(f"{exc} (metrics {', '.join(self.metrics)} on {chip})") from None

    def _add(self, metrics: Sequence[str]) -> None:
        """Add ``metrics`` together (CUPTI packs them into as few passes as it can: 4 on GH100 for
        :data:`COALESCING_METRICS`, 8 when added one by one); a refusal is narrowed to the metric it is about."""
        try:
            _call(self.lib, "cuptiProfilerHostConfigAddMetrics",
                  _HostAddMetrics.new(pHostObject=self._host, ppMetricNames=_name_array(metrics),
                                      numMetrics=len(metrics)))
        except CuptiError:
            if len(metrics) == 1:
                raise UnknownMetric(f"{self.chip} has no metric {metrics[0]!r} (CUPTI refused it)") from None
            for metric in metrics:  # which one: a host object that refused a metric may be left as it was
                self._probe(metric)
            raise

    def _probe(self, metric: str) -> None:
        with MetricConfig(self.chip, [metric]):
            pass

    def evaluate(self, counter_data, range_index: int) -> dict[str, float]:
        """The metric values of range ``range_index`` of a decoded counter data image."""
        values = (ctypes.c_double * len(self.metrics))()
        _call(self.lib, "cuptiProfilerHostEvaluateToGpuValues",
              _HostEvaluate.new(pHostObject=self._host, pCounterDataImage=ctypes.cast(counter_data, _p),
                                counterDataImageSize=len(counter_data), rangeIndex=range_index,
                                ppMetricNames=_name_array(self.metrics), numMetrics=len(self.metrics),
                                pMetricValues=values))
        return dict(zip(self.metrics, values))

    def close(self) -> None:
        if getattr(self, "_host", None):
            _call(self.lib, "cuptiProfilerHostDeinitialize", _HostDeinitialize.new(pHostObject=self._host))
            self._host = None

    def __enter__(self) -> MetricConfig:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- the target side: one range per kernel launch --------------------------------------------------------------

@dataclass(frozen=True)
class LaunchCounters:
    """The counters of one kernel launch: its kernel's (mangled) name and each metric's value."""

    kernel: str
    values: dict[str, float]

    def get(self, op: str, what: str) -> float:
        """``op`` in ``ld``, ``st``, ``atom``, ``red``; ``what`` in ``sectors``, ``requests``."""
        return self.values.get(f"l1tex__t_{what}_pipe_lsu_mem_global_op_{op}.sum", float("nan"))


def _current_context() -> int:
    """The calling thread's CUDA context (the driver's ``cuCtxGetCurrent``); Numba's is made current first."""
    try:
        from numba import config, cuda
        if config.ENABLE_CUDASIM:
            raise CountersUnavailable("numba.cuda runs on its simulator in this process (NUMBA_ENABLE_CUDASIM): "
                                      "it has no counters")
        cuda.current_context()
        driver = ctypes.CDLL("libcuda.so.1")
    except CountersUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - no driver, no GPU: say so, in one line
        raise CountersUnavailable(f"no CUDA GPU: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    ctx = ctypes.c_void_p()
    if driver.cuCtxGetCurrent(ctypes.byref(ctx)) or not ctx.value:
        raise CountersUnavailable("no current CUDA context")
    return ctx.value


def require() -> None:
    """Raise :class:`CountersUnavailable` (naming what is missing) unless the CUPTI library loads and a CUDA GPU
    is there: what :func:`measure` needs before anything is staged on the device."""
    library()
    _current_context()


def measure(run: Callable[[], object], metrics: Sequence[str] = COALESCING_METRICS, *, device_index: int = 0,
            max_launches: int = 64) -> list[LaunchCounters]:
    """Run ``run()`` once with each of its kernel launches (at most ``max_launches``) profiled on its own, and
    return their counters in launch order. CUPTI replays each launch once per pass (saving and restoring the
    memory it writes), so the values are exact counts of one launch. Everything ``run`` launches must finish
    before it returns (synchronise)."""
    lib = library()
    ctx = _current_context()
    _call(lib, "cuptiProfilerInitialize", _Initialize.new())
    try:
        chip = _ChipName.new(deviceIndex=device_index)
        _call(lib, "cuptiDeviceGetChipName", chip)
        avail = _Availability.new(ctx=ctx)
        _call(lib, "cuptiProfilerGetCounterAvailability", avail)
        availability = (ctypes.c_uint8 * avail.counterAvailabilityImageSize)()
        _call(lib, "cuptiProfilerGetCounterAvailability",
              _Availability.new(ctx=ctx, counterAvailabilityImageSize=len(availability),
                                pCounterAvailabilityImage=ctypes.cast(availability, _p)))
        with MetricConfig(chip.pChipName.decode(), metrics, availability) as config:
            return _profile(lib, ctx, config, run, max_launches)
    finally:
        _call(lib, "cuptiProfilerDeInitialize", _DeInitialize.new())


def _profile(lib, ctx: int, config: MetricConfig, run, max_launches: int) -> list[LaunchCounters]:
    enable = _Enable.new(ctx=ctx)
    _call(lib, "cuptiRangeProfilerEnable", enable)
    profiler = enable.pRangeProfilerObject
    try:
        names = _name_array(config.metrics)
        size = _DataSize.new(pRangeProfilerObject=profiler, pMetricNames=names, numMetrics=len(config.metrics),
                             maxNumOfRanges=max_launches, maxNumRangeTreeNodes=max_launches)
        _call(lib, "cuptiRangeProfilerGetCounterDataSize", size)
        data = (ctypes.c_uint8 * size.counterDataSize)()
        _call(lib, "cuptiRangeProfilerCounterDataImageInitialize",
              _DataInit.new(pRangeProfilerObject=profiler, counterDataSize=len(data),
                            pCounterData=ctypes.cast(data, _p)))
        _call(lib, "cuptiRangeProfilerSetConfig",
              _SetConfig.new(pRangeProfilerObject=profiler, configSize=len(config.image),
                             pConfig=ctypes.cast(config.image, _p), counterDataImageSize=len(data),
                             pCounterDataImage=ctypes.cast(data, _p), range=_AUTO_RANGE, replayMode=_KERNEL_REPLAY,
                             maxRangesPerPass=max_launches, numNestingLevels=1, minNestingLevel=1, passIndex=0,
                             targetNestingLevel=1))
        _call(lib, "cuptiRangeProfilerStart", _Object.new(pRangeProfilerObject=profiler))
        try:
            run()
        finally:
            stop = _Stop.new(pRangeProfilerObject=profiler)
            _call(lib, "cuptiRangeProfilerStop", stop)
        decode = _Decode.new(pRangeProfilerObject=profiler)
        _call(lib, "cuptiRangeProfilerDecodeData", decode)
        if decode.numOfRangeDropped:
            raise CuptiError(f"{decode.numOfRangeDropped} launches were not recorded: more than max_launches "
                             f"({max_launches})")
        info = _DataInfo.new(pCounterDataImage=ctypes.cast(data, _p), counterDataImageSize=len(data))
        _call(lib, "cuptiRangeProfilerGetCounterDataInfo", info)
        out = []
        for i in range(info.numTotalRanges):
            name = _RangeInfo.new(pCounterDataImage=ctypes.cast(data, _p), counterDataImageSize=len(data),
                                  rangeIndex=i, rangeDelimiter=b"/")
            _call(lib, "cuptiRangeProfilerCounterDataGetRangeInfo", name)
            out.append(LaunchCounters(name.rangeName.decode() if name.rangeName else f"range {i}",
                                      config.evaluate(data, i)))
        return out
    finally:
        _call(lib, "cuptiRangeProfilerDisable", _Object.new(pRangeProfilerObject=profiler))


__all__ = ["COALESCING_METRICS", "CountersUnavailable", "CuptiError", "LaunchCounters", "MetricConfig", "UnknownMetric",
           "library_candidates", "measure", "require", "supported_chips"]
