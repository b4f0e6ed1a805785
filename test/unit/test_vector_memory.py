"""codegen/vector_memory.py on random index math: every access keeps its address, and every vector is aligned to its
own size for every value of the ranges (CUDA's vector loads fault when misaligned)."""
from __future__ import annotations
import itertools, random
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.dtype import dtypes
from petagrad.uop.graph import substitute
from petagrad.uop.symbolic import simplify
from petagrad.codegen.vector_memory import combine_memory

def _value(idx: UOp, env: dict[UOp, int]) -> int:
  out = simplify(substitute(idx, {r: UOp.const(dtypes.index, v) for r, v in env.items()}))
  assert out.op is Ops.CONST
  return out.arg

def test_joined_accesses_keep_their_addresses_and_are_aligned():
  rng = random.Random(0)
  r0, r1 = UOp(Ops.RANGE, dtypes.index, (), (0, 3, "global")), UOp(Ops.RANGE, dtypes.index, (), (1, 4, "local"))
  out, inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1)
  halves = UOp(Ops.DEFINE_GLOBAL, dtypes.float16, (), 2)
  joined = 0
  for _ in range(150):
    a, b = rng.choice([1, 2, 4, 8, 12]), rng.choice([0, 2, 4, 6, 16])
    base = r0 * a + r1 * b
    buf = rng.choice([inp, halves])
    consts = sorted(rng.sample(range(12), rng.randint(1, 10)))
    loads = [UOp(Ops.LOAD, buf.dtype, (buf, base + c)) for c in consts]
    vals = [l.cast(dtypes.float32) if l.dtype != dtypes.float32 else l for l in loads]
    sc = sorted(rng.sample(range(12), len(vals)))
    ast = UOp(Ops.SINK, dtypes.bool, tuple(UOp(Ops.STORE, dtypes.float32, (out, r1 * 16 + r0 * 64 + c, v)) for c, v in zip(sc, vals)))
    new = combine_memory(ast, 16)
    for u in new.toposort():
      if u.op is Ops.LOAD and u.dtype.count > 1: joined += 1
    for env in (dict(zip((r0, r1), v)) for v in itertools.product(range(3), range(4))):
      # the address each store writes and each of its values reads, before and after
      def accesses(sink: UOp) -> set:
        seen = set()
        for s in sink.src:
          lanes = s.src[2].src if s.src[2].op is Ops.VECTORIZE else (s.src[2],)
          at = _value(s.src[1], env)
          if s.src[2].op is Ops.VECTORIZE: assert at % len(lanes) == 0, "misaligned vector store"
          for i, v in enumerate(lanes):
            x = v.src[0] if v.op is Ops.CAST else v
            if x.op is Ops.GEP:
              vec = x.src[0]
              start = _value(vec.src[1], env)
              assert start % vec.dtype.count == 0 and vec.dtype.count * vec.dtype.scalar().itemsize <= 16, "misaligned vector load"
              src_at = (vec.src[0].arg, start + x.arg)
            else: src_at = (x.src[0].arg, _value(x.src[1], env))
            seen.add((at + i, src_at))
        return seen
      assert accesses(new) == accesses(ast)
  assert joined > 50   # (the cases do join)
