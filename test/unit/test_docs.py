"""The docs stay current: every flag is documented."""
import os, subprocess, sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def test_every_flag_documented():
  r = subprocess.run([sys.executable, os.path.join(REPO, "docs", "check_env_vars.py")], capture_output=True, text=True,
                     env={**os.environ, "PYTHONPATH": REPO})
  assert r.returncode == 0, r.stdout + r.stderr
