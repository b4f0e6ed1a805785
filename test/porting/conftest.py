"""Every porting case starts in eval mode (a case that trains sets it) and leaves the mode as it found it."""
import pytest
from petagrad import Tensor

@pytest.fixture(autouse=True)
def _eval_mode():
  prev = Tensor.training
  Tensor.training = False
  yield
  Tensor.training = prev
