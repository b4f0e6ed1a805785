"""Shared test setup: every backend test runs once per available device (CPU and PYTHON)."""
from __future__ import annotations
import os, sys
import pytest
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))   # test/helpers.py: `from helpers import helper_test_op`
from petagrad.helpers import Context

# pytest-xdist runs several workers on few cores: one thread per kernel avoids oversubscription
# (test_opt.py runs threaded kernels explicitly)
if "PYTEST_XDIST_WORKER" in os.environ and "THREADS" not in os.environ:
  from petagrad.helpers import THREADS
  THREADS.value = 1

DEVICES = [d for d in os.environ.get("TEST_DEVICES", "CPU,PYTHON").split(",") if d]

# TEST_CPU_QUEUES=1: a second CPU device is open in every test process, so every CPU kernel runs on the devices' launch
# queues (docs/multi.md, "Several CPU devices in one process"; CI runs part of the suite this way)
if os.environ.get("TEST_CPU_QUEUES") == "1":
  from petagrad.device import Device
  Device["CPU:1"]

@pytest.fixture(params=DEVICES)
def device(request):
  """Run the test with Device.DEFAULT set to each test device in turn."""
  with Context(DEV=request.param):
    yield request.param

@pytest.fixture
def applied_opts(monkeypatch):
  """The optimizations the hand-coded heuristics applied to each kernel of the test (a list per kernel): the in-memory
  kernel and launch-plan caches start empty and the disk cache is off, so every kernel is optimized here."""
  import petagrad.engine.realize as R
  from petagrad.helpers import DISABLE_DISK_CACHE
  monkeypatch.setattr(R, "_kernel_cache", {})
  monkeypatch.setattr(R, "_plans", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)
  applied, hand_coded = [], R.hand_coded_optimizations
  def record(k, *args):
    k = hand_coded(k, *args)
    applied.append(list(k.applied))
    return k
  monkeypatch.setattr(R, "hand_coded_optimizations", record)
  return applied
