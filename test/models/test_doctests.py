"""The runnable examples in the docstrings of the training modules (nn layers, optimizers, schedulers, state,
datasets, the JIT) run and print what they say."""
from __future__ import annotations
import doctest, importlib
import pytest

MODULES = ["petagrad.nn", "petagrad.nn.optim", "petagrad.nn.lr_scheduler", "petagrad.nn.amp", "petagrad.nn.state",
           "petagrad.nn.datasets", "petagrad.nn.recompute", "petagrad.engine.jit"]

@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  mod = importlib.import_module(name)
  res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
  assert res.failed == 0, f"{res.failed} of {res.attempted} examples failed in {name} (run: python -m doctest -v {mod.__file__})"
  assert res.attempted > 0, f"{name} has no runnable example"
