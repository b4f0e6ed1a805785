"""The pipeline order of docs (DESIGN.md, docs/architecture.md): a lower stage never imports a higher one.

Every module under petagrad/ is parsed (nothing is imported or run), and every import in it counts: at module level,
inside functions, under `if TYPE_CHECKING:` (no exemptions). A stage that needs something from a higher one gets it
passed in or registered into it (tensor.py registers itself into engine/jit.py's TensorLayer; the engine passes its
compiler to codegen/search.py's beam_search).
"""
from __future__ import annotations
import ast, pathlib
import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "petagrad"

# lowest first. device.py (Buffer, the device registry) sits below the IR: uop/graph.py makes BUFFER nodes over
# Buffers. The device registry loads runtime/ops_*.py by name at run time (importlib), which is not an import here.
# renderer/ prints codegen's linear programs (it imports codegen/linearize.py); runtime/ holds the devices, each with
# its renderer; the engine compiles (codegen) and launches (runtime, through the device registry); the op mixins
# build on the engine's JIT state; the Tensor core combines the mixins; nn/, onnx/ and models/ use Tensor; the
# top-level petagrad/__init__.py re-exports from all of them.
STAGES = ["helpers", "dtype", "device", "uop", "schedule", "codegen", "renderer", "runtime", "engine", "mixin", "tensor", "nn",
          "onnx", "models", "__init__"]
RANK = {s: i for i, s in enumerate(STAGES)}

def _module_name(path: pathlib.Path) -> str:
  rel = path.relative_to(PKG.parent).with_suffix("")
  parts = list(rel.parts)
  if parts[-1] == "__init__": parts = parts[:-1]
  return ".".join(parts)

def _stage(module: str) -> str:
  """'petagrad.mixin.movement' -> 'mixin'; the package itself ('petagrad') and its programs (`python -m` entry points,
  `__main__` modules such as the device probe) are the top stage."""
  parts = module.split(".")
  assert parts[0] == "petagrad", module
  return "__init__" if len(parts) == 1 or parts[-1] == "__main__" else parts[1]

def _imports(path: pathlib.Path, module: str) -> list[tuple[int, str]]:
  """(line, imported petagrad module) for every import in the file, wherever it is."""
  tree = ast.parse(path.read_text(), str(path))
  is_pkg = path.name == "__init__.py"
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "petagrad"]
    elif isinstance(node, ast.ImportFrom):
      if node.level:   # relative: resolve against this module's package
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        src = ".".join(base + ([node.module] if node.module else []))
      else: src = node.module or ""
      if src.split(".")[0] != "petagrad": continue
      for a in node.names:   # `from petagrad import tensor` imports the submodule; `from petagrad import Tensor` the package
        sub = f"{src}.{a.name}"
        out.append((node.lineno, sub if _is_module(sub) else src))
  return out

def _is_module(name: str) -> bool:
  p = PKG.parent.joinpath(*name.split("."))
  return p.with_suffix(".py").exists() or (p / "__init__.py").exists()

MODULES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)

def test_every_module_has_a_stage():
  for p in MODULES:
    assert _stage(_module_name(p)) in RANK, f"{p.relative_to(PKG.parent)}: add its stage to STAGES in {__file__}"

@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG.parent)))
def test_no_import_from_a_higher_stage(path):
  module = _module_name(path)
  mine = _stage(module)
  bad = [f"line {ln}: imports {imp} (stage {_stage(imp)!r})" for ln, imp in _imports(path, module)
         if _stage(imp) in RANK and RANK[_stage(imp)] > RANK[mine]]
  assert not bad, f"{module} (stage {mine!r}) imports from a higher stage:\n  " + "\n  ".join(bad)

def test_mixins_never_import_tensor():
  for p in (PKG / "mixin").glob("*.py"):
    hits = [ln for ln, imp in _imports(p, _module_name(p)) if imp == "petagrad.tensor" or imp == "petagrad"]
    assert not hits, f"{p.name} imports petagrad.tensor (or the package) at lines {hits}: use type(self) / TensorMixin"

def test_no_import_cycles():
  """No cycle between modules, counting every import (lazy ones inside functions too)."""
  graph = {}
  for p in MODULES:
    m = _module_name(p)
    # importing a submodule runs its packages' __init__ first; those edges are implied and not counted
    graph[m] = {imp for _, imp in _imports(p, m) if imp != m and not m.startswith(imp + ".")}
  state: dict[str, int] = {}   # 1: on the current path, 2: done
  def visit(start: str) -> list[str] | None:
    stack = [(start, iter(sorted(graph.get(start, ()))))]
    path = [start]
    state[start] = 1
    while stack:
      node, it = stack[-1]
      nxt = next(it, None)
      if nxt is None:
        state[node] = 2; stack.pop(); path.pop(); continue
      if state.get(nxt) == 1: return path[path.index(nxt):] + [nxt]
      if state.get(nxt) is None and nxt in graph:
        state[nxt] = 1; stack.append((nxt, iter(sorted(graph[nxt])))); path.append(nxt)
    return None
  for m in sorted(graph):
    if state.get(m) is None and (cycle := visit(m)) is not None: pytest.fail("import cycle: " + " -> ".join(cycle))
