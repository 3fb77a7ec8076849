"""Check, then time, one grouped-GEMM implementation on one problem.

An implementation computes, for every expert ``e``, ``out[rows_e] = A[rows_e] @ W[e].T`` with

* ``A``: ``(rows, k)`` bf16, rows sorted by expert;
* ``W``: ``(E, n, k)`` bf16, each expert's weight in ``nn.Linear`` layout;
* ``offsets``: ``(E,)`` int32 cumulative *end* offsets on the GPU (torch ``grouped_mm`` convention);
* ``out``: ``(rows, n)`` bf16.

It is registered under a name as an :class:`Implementation`. Its ``prepare`` step does everything
that is not part of one forward call (building ``cu_seqlens``, transposed views, autotuning, picking a
tile configuration) and returns a :class:`Prepared` whose ``run(out)`` is the work that is timed.

The order is always: correctness first (fresh random inputs, output poisoned with NaN, compared with
a float32 reference at a tolerance set by PyTorch's own bf16 error), then timing (warm-up, a CUDA
graph of several launches over rotating input sets, replays, median/min/max). Several
implementations of one problem are timed in interleaved rounds (:func:`time_interleaved`), in an
order where each takes every position and follows every other equally often
(:func:`interleaved_order`), so that a drift during the run, or the state one implementation leaves
the GPU in, touches all alike and ratios hold to a few tenths of a percent.
"""

from __future__ import annotations

import math
import statistics
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..workloads import GroupedProblem
from .registry import (
    REGISTRY,
    Implementation,
    ImplementationUnavailable,
    Prepared,
    get_impl,
    impl_names,
    register,
)

__all__ = [
    "Implementation",
    "ImplementationUnavailable",
    "Prepared",
    "CheckResult",
    "Timing",
    "REGISTRY",
    "register",
    "get_impl",
    "impl_names",
    "make_inputs",
    "reference_fp32",
    "torch_bf16_per_expert",
    "check",
    "check_many",
    "input_sets_for",
    "sets_for",
    "interleaved_order",
    "capture",
    "graph_of",
    "queue_turn",
    "time_interleaved",
    "run_rounds",
    "turn_seconds",
    "time_impl",
    "spread_of",
    "verify_outputs",
    "measure_ceilings",
    "floor_seconds",
    "metrics",
]

#: Largest error of a result against the float32 reference, relative to PyTorch's own bf16 error on
#: the same inputs (quack's tests use the same factor), plus an absolute floor.
ERR_FACTOR = 2.0
ERR_FLOOR = 1e-3


# ----------------------------------------------------------------------------------- inputs
def make_inputs(problem: GroupedProblem, device="cuda", seed: int = 0, dtype=None):
    """Random A (rows, k), W (E, n, k) and int32 end offsets for ``problem``.

    A ~ N(0, 1) and W ~ N(0, 1/k), so outputs are of order 1. Never zeros: zeros hide unwritten
    outputs and wrong indexing, and run faster than real data.
    """
    import torch

    dtype = dtype or torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(seed)
    A = torch.randn((problem.rows, problem.k), generator=gen, device=device, dtype=torch.float32)
    W = torch.randn(
        (problem.experts, problem.n, problem.k), generator=gen, device=device, dtype=torch.float32
    )
    W.mul_(problem.k**-0.5)
    offsets = torch.tensor(problem.offsets, dtype=torch.int32, device=device)
    return A.to(dtype), W.to(dtype), offsets


def _expert_slices(counts):
    start = 0
    for e, c in enumerate(counts):
        yield e, start, start + c
        start += c


def reference_fp32(A, W, counts):
    """out = A @ W[e].T per expert in float32 (TF32 off): the reference every result is held to."""
    import torch

    out = torch.zeros((A.shape[0], W.shape[1]), dtype=torch.float32, device=A.device)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for e, lo, hi in _expert_slices(counts):
            if hi > lo:
                out[lo:hi] = A[lo:hi].float() @ W[e].float().t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return out


def torch_bf16_per_expert(A, W, counts):
    """PyTorch's own bf16 answer (one torch.mm per expert): sets the error we tolerate."""
    from ..moe.reference import grouped_mm_loop
    from ..workloads import counts_to_offsets

    return grouped_mm_loop(A, W, counts_to_offsets(counts))


# ------------------------------------------------------------------------------ correctness
@dataclass
class CheckResult:
    ok: bool
    max_abs_err: float
    torch_bf16_err: float
    tolerance: float
    rel_fro_err: float
    unwritten_rows: int
    message: str = ""

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "max_abs_err": self.max_abs_err,
            "torch_bf16_max_abs_err": self.torch_bf16_err,
            "tolerance": self.tolerance,
            "rel_fro_err": self.rel_fro_err,
            "unwritten_rows": self.unwritten_rows,
            "message": self.message,
        }


def tolerance_for(torch_err: float) -> float:
    """Tolerated max-abs error: ERR_FACTOR x PyTorch's bf16 error + ERR_FLOOR."""
    return ERR_FACTOR * torch_err + ERR_FLOOR


def compare(out, ref, torch_out) -> CheckResult:
    """Compare a result with the fp32 reference; NaN anywhere (an unwritten row) fails."""
    import torch

    outf = out.float()
    nan_rows = int(torch.isnan(outf).any(dim=1).sum().item()) if out.numel() else 0
    finite = torch.nan_to_num(outf, nan=0.0)
    err = float((finite - ref).abs().max().item()) if out.numel() else 0.0
    terr = float((torch_out.float() - ref).abs().max().item()) if out.numel() else 0.0
    ref_norm = float(ref.norm().item()) if out.numel() else 0.0
    rel = float((finite - ref).norm().item() / ref_norm) if ref_norm > 0 else 0.0
    tol = tolerance_for(terr)
    problems = []
    if nan_rows:
        problems.append(f"{nan_rows} rows not written (NaN left from the poison)")
    if not err <= tol:
        problems.append(f"max abs error {err:.3g} > tolerance {tol:.3g} (torch bf16: {terr:.3g})")
    ok = not problems
    return CheckResult(ok, err, terr, tol, rel, nan_rows, "; ".join(problems) or "ok")


def _poisoned_output(rows: int, n: int, device):
    import torch

    return torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=device)


def run_poisoned(prepared: Prepared, rows: int, n: int, device):
    """Run once into a NaN-filled output and return what the implementation produced.

    For an implementation that returns a fresh tensor, a NaN block of the same size is allocated
    and freed first, so the caching allocator hands that poisoned memory to the implementation.
    """
    import torch

    if prepared.writes_out:
        out = _poisoned_output(rows, n, device)
        result = prepared.run(out)
        if result is not None and result.data_ptr() != out.data_ptr():
            raise RuntimeError("implementation says it writes `out` but returned another tensor")
    else:
        poison = _poisoned_output(rows, n, device)
        del poison
        result = prepared.run(None)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return out if prepared.writes_out else result


def check(impl: Implementation, problem: GroupedProblem, device="cuda", seed: int = 1):
    """Correctness of ``impl`` on fresh random inputs of ``problem``; returns (CheckResult, config)."""
    return check_many({impl.name: impl}, problem, device, seed)[impl.name]


def check_many(impls: dict, problem: GroupedProblem, device="cuda", seed: int = 1) -> dict:
    """:func:`check` of several implementations on one set of fresh random inputs, whose float32
    reference and PyTorch bf16 answer are computed once. Returns ``{name: (CheckResult, config)}``;
    an implementation that raises gets the exception in place of its CheckResult (config ``{}``)."""
    A, W, offsets = make_inputs(problem, device, seed)
    counts = list(problem.counts)
    ref = reference_fp32(A, W, counts)
    torch_out = torch_bf16_per_expert(A, W, counts)
    results = {}
    for name, impl in impls.items():
        try:
            prepared = impl.prepare(A, W, offsets, counts)
            out = run_poisoned(prepared, problem.rows, problem.n, device)
            results[name] = (compare(out, ref, torch_out), prepared.config)
        except Exception as exc:
            if len(impls) == 1:
                raise
            results[name] = (exc, {})
            sync(device)
        finally:
            out = prepared = None  # noqa: F841  (free the output before the next one)
    return results


def sync(device) -> None:
    """Wait for ``device``'s work; a CUDA error pending there is left for the next call to raise."""
    import torch

    if torch.device(device).type == "cuda":
        try:
            torch.cuda.synchronize(device)
        except Exception:  # a sticky CUDA error: the next call reports it
            pass


# ----------------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Times of one implementation on one problem: every sample is one graph replay divided by the
    calls it holds. With ``rounds > 1`` the samples were taken in interleaved rounds (each round
    times every implementation of the problem in turn); ``round_medians_s`` holds the median of
    each round, in round order, so two implementations of one run can be compared round by round."""

    median_s: float
    min_s: float
    max_s: float
    reps: int
    launches_per_graph: int
    input_sets: int
    samples_s: list = field(default_factory=list)
    #: the graph's outputs, checked per input set after the timed replays (None: not checked)
    outputs_ok: bool | None = None
    outputs_message: str = ""
    rounds: int = 1
    round_medians_s: list = field(default_factory=list)
    #: per round, the implementation timed right before this one (None: the first turn)
    after: list = field(default_factory=list)

    @classmethod
    def from_rounds(cls, rounds: list[list[float]], launches: int, sets: int) -> Timing:
        samples = [s for r in rounds for s in r]
        return cls(
            statistics.median(samples),
            min(samples),
            max(samples),
            len(samples),
            launches,
            sets,
            samples,
            rounds=len(rounds),
            round_medians_s=[statistics.median(r) for r in rounds],
        )

    @property
    def spread(self) -> dict:
        """Spread of the round medians relative to the median: (max - min) and the interquartile
        range, in percent (0 with a single round)."""
        return spread_of(self.round_medians_s, self.median_s)

    def as_dict(self) -> dict:
        d = {
            "median_us": self.median_s * 1e6,
            "min_us": self.min_s * 1e6,
            "max_us": self.max_s * 1e6,
            "reps": self.reps,
            "launches_per_graph": self.launches_per_graph,
            "input_sets": self.input_sets,
        }
        if self.rounds > 1:
            d["rounds"] = self.rounds
            d["round_median_us"] = [t * 1e6 for t in self.round_medians_s]
            d.update(self.spread)
            if self.after:
                d["after"] = list(self.after)
        if self.outputs_ok is not None:
            d["outputs_ok"] = self.outputs_ok
            d["outputs_message"] = self.outputs_message
        return d


def spread_of(values: list[float], center: float) -> dict:
    """``{"range_pct", "iqr_pct"}``: max - min and Q3 - Q1 of ``values`` in percent of ``center``."""
    if len(values) < 2 or not center:
        return {"range_pct": 0.0, "iqr_pct": 0.0}
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {
        "range_pct": 100.0 * (max(values) - min(values)) / center,
        "iqr_pct": 100.0 * (q3 - q1) / center,
    }


def verify_outputs(
    problem: GroupedProblem, inputs: list, outputs: list, refs: dict | None = None
) -> tuple[bool, str]:
    """Check what a timed graph left behind: ``outputs[s]`` must be the product of ``inputs[s]``
    (A, W, offsets) within the check's tolerance. This catches a graph that does not rotate through
    its input sets (every output would equal one set's product) or that computes garbage when
    replayed, which the check before timing (a plain call on other inputs) cannot see.

    ``refs`` (a dict, filled here) keeps each set's reference and PyTorch answer, so several
    implementations timed on the same input sets compute them once."""
    counts = list(problem.counts)
    refs = {} if refs is None else refs
    bad = []
    for s, ((A, W, _), out) in enumerate(zip(inputs, outputs, strict=True)):
        if s not in refs:
            refs[s] = (reference_fp32(A, W, counts), torch_bf16_per_expert(A, W, counts))
        ref, torch_out = refs[s]
        res = compare(out, ref, torch_out)
        if not res.ok:
            bad.append(f"input set {s}: {res.message}")
    if bad:
        return False, "; ".join(bad)[:500]
    return True, f"{len(outputs)} input set(s) checked after the timed replays"


def input_sets_for(
    bytes_per_call: int, l2_bytes: int, factor: float = 4.0, max_sets: int = 32
) -> int:
    """How many input sets to rotate so that the data touched between two uses of the same set is
    at least ``factor`` times the L2 size: a problem that fits in L2 is then not timed from cache."""
    if bytes_per_call <= 0:
        raise ValueError("bytes_per_call must be positive")
    return max(1, min(max_sets, math.ceil(factor * l2_bytes / bytes_per_call)))


def sets_for(problem: GroupedProblem, l2_bytes: int, memory_cap_bytes: int = 40 << 30) -> int:
    """Input sets to rotate for ``problem``: :func:`input_sets_for`, capped so the sets fit in
    ``memory_cap_bytes``."""
    sets = input_sets_for(problem.bytes_moved(), l2_bytes)
    per_set_bytes = 2 * (problem.rows * problem.k + problem.experts * problem.n * problem.k)
    per_set_bytes += 2 * problem.rows * problem.n
    return max(1, min(sets, memory_cap_bytes // max(per_set_bytes, 1)))


def order_cycle(n: int) -> int:
    """Rounds after which :func:`interleaved_order` repeats (and is fully balanced): n for an even
    number of implementations, 2 n for an odd one."""
    return n if n % 2 == 0 else 2 * n


def interleaved_order(names: list, round_index: int) -> list:
    """The order implementations are timed in round ``round_index``: a Williams design.

    Every implementation is interleaved with the others (drifts of clock, temperature or the
    machine's neighbours hit all alike). Over :func:`order_cycle` consecutive rounds each takes
    every position equally often and comes right after every other equally often; a run of
    fewer rounds is balanced only in part. The predecessor matters: an implementation inherits
    the GPU state the one before leaves (at decode the H200 runs at its power limit). A plain
    rotation (A B C, B C A, C A B) keeps every predecessor fixed; in the committed compare run
    of 2026-11-30 it put our kernel right after quack-tuned in 4 of 5 rounds.

    Row 0 is 0, 1, n-1, 2, n-2, ...; forward row k adds k (mod n). For even n round r is forward
    row r. For odd n the rounds alternate forward and reversed rows (forward row r for even r,
    reversed row r for odd r, indices mod n), which over 2 n rounds uses every row both ways,
    and no round starts with the implementation that ended the round before.
    """
    n = len(names)
    if n == 0:
        return []
    base, lo, hi = [0], 1, n - 1
    for i in range(1, n):
        if i % 2:
            base.append(lo)
            lo += 1
        else:
            base.append(hi)
            hi -= 1
    r = round_index % order_cycle(n)
    row = [names[(x + r) % n] for x in base]
    return row[::-1] if n % 2 and r % 2 else row


@lru_cache(maxsize=64)
def _arranged_rows(n: int, rounds: int, offset: int = 0) -> tuple:
    """Row indices of :func:`interleaved_order` for ``rounds`` rounds of ``n`` implementations,
    arranged so that the hand-overs between rounds (the last of one round before the first of the
    next, read cyclically) are spread: no implementation right after itself, and no ordered pair
    more often than ``ceil(rounds / (n (n - 1)))`` times. A depth-first search over the cycle's
    rows (``rounds`` consecutive rows from row ``offset``: whole cycles use every row equally
    often); the plain sequence where no arrangement exists (one or two implementations)."""
    cycle = order_cycle(n)
    pool = [(offset + r) % cycle for r in range(rounds)]
    plain = tuple(pool)
    if n < 3 or rounds < 2:
        return plain
    rows = {r: interleaved_order(list(range(n)), r) for r in set(pool)}
    cap = -(-rounds // (n * (n - 1)))
    left = Counter(pool)
    seq = [pool[0]]
    left[pool[0]] -= 1
    used: Counter = Counter()
    steps = [0]

    def arc(a: int, b: int) -> tuple:
        return rows[a][-1], rows[b][0]

    def dfs() -> bool:
        steps[0] += 1
        if steps[0] > 200_000:  # give up: fall back to the plain sequence
            return False
        if len(seq) == rounds:
            last = arc(seq[-1], seq[0])  # the cycle closes (runs of several cycles repeat it)
            return last[0] != last[1] and used[last] < cap
        for r in sorted(left, key=lambda r: (used[arc(seq[-1], r)], r)):
            if not left[r]:
                continue
            a = arc(seq[-1], r)
            if a[0] == a[1] or used[a] >= cap:
                continue
            seq.append(r)
            left[r] -= 1
            used[a] += 1
            if dfs():
                return True
            seq.pop()
            left[r] += 1
            used[a] -= 1
        return False

    return tuple(seq) if dfs() else plain


def round_orders(names: list, rounds: int, start: int = 0) -> list[list]:
    """The order of each of ``rounds`` rounds: the rows of :func:`interleaved_order` (every
    implementation in every position, and right after every other, equally often over a cycle),
    arranged by :func:`_arranged_rows` so that the hand-over from one round to the next does not
    keep putting the same implementation after the same one. (In sequence, the rows hand over from
    each implementation to the next in the list: in the compare run of 2026-11-30 15:16 UTC our
    kernel followed quack-tuned at 2 of 9 hand-overs, on top of 2 of 10 rounds inside them.)
    ``start`` rotates the arrangement (the bench passes a hash of the problem's name)."""
    n = len(names)
    if n == 0:
        return [[] for _ in range(rounds)]
    cycle = order_cycle(n)
    seq = _arranged_rows(n, rounds, start % cycle if rounds % cycle else 0)
    shift = start % len(seq) if seq else 0
    seq = seq[shift:] + seq[:shift]
    return [[names[i] for i in interleaved_order(list(range(n)), r)] for r in seq]


@dataclass
class GraphTimer:
    """One implementation captured in a CUDA graph of ``launches`` calls over the input sets."""

    name: str
    graph: Any
    launches: int
    sets: int
    inputs: list
    outputs: list
    config: dict
    rounds: list = field(default_factory=list)
    failure: Exception | None = None
    after: list = field(default_factory=list)  # per round: the implementation timed just before
    #: what the graph's kernels read and nothing else holds: the prepared calls and what they
    #: allocated (a converted weight, an offsets tensor). A CUDA graph keeps raw addresses, not
    #: tensors, so without this reference a replay reads memory the allocator has reused or
    #: released (capturing the next graph empties the allocator's cache).
    keep: Any = None


def capture(impl: Implementation, problem: GroupedProblem, inputs: list, launches: int, device):
    """Prepare ``impl`` on every input set, warm it up (compiles, cuBLAS handles) outside the
    graph, then capture ``launches`` calls (call ``i`` on set ``i % sets``) in one CUDA graph.
    Events are recorded on the current stream, the stream ``graph.replay()`` launches on."""
    import torch

    sets = len(inputs)
    counts = list(problem.counts)
    runs = []
    config = {}
    for A, W, offsets in inputs:
        prepared = impl.prepare(A, W, offsets, counts)
        config = prepared.config
        out = torch.empty((problem.rows, problem.n), dtype=torch.bfloat16, device=device)
        runs.append((prepared, out))

    def call(i):
        prepared, out = runs[i % sets]
        result = prepared.run(out if prepared.writes_out else None)
        return out if prepared.writes_out else result

    graph, outputs = graph_of(call, sets, launches, device)
    return GraphTimer(impl.name, graph, launches, sets, inputs, outputs, config, keep=runs)


def graph_of(call, sets: int, launches: int, device):
    """``call(i)`` (the work on input set ``i % sets``, returning its output tensor) warmed up on a
    side stream outside the graph (compiles, cuBLAS handles), then ``launches`` calls captured in
    one CUDA graph and replayed twice. Returns ``(graph, outputs)``: ``outputs[s]`` is the
    graph's (static) output tensor for input set ``s``."""
    import torch

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(max(3, sets)):
            call(i)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)

    graph = torch.cuda.CUDAGraph()
    outputs: list = [None] * sets
    with torch.cuda.graph(graph):
        for i in range(launches):
            outputs[i % sets] = call(i)
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize(device)
    return graph, outputs


def queue_turn(timer: GraphTimer, reps: int, warmup_replays: int = 1) -> list:
    """Queue one turn of ``timer``'s graph: ``warmup_replays`` untimed replays, then ``reps``
    replays each between two CUDA events. Returns the event pairs (read them after a sync with
    :func:`turn_seconds`)."""
    import torch

    for _ in range(warmup_replays):
        timer.graph.replay()
    events = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        timer.graph.replay()
        stop.record()
        events.append((start, stop))
    return events


def turn_seconds(timer: GraphTimer, events: list) -> list[float]:
    """Seconds per call of each timed replay of a turn queued by :func:`queue_turn`."""
    return [a.elapsed_time(b) * 1e-3 / timer.launches for a, b in events]


def time_interleaved(
    impls: dict,
    problem: GroupedProblem,
    rounds: int = 5,
    reps: int = 5,
    launches: int = 10,
    device="cuda",
    seed: int = 100,
    memory_cap_bytes: int = 40 << 30,
    verify: bool = True,
    warmup_replays: int = 1,
    first_round: int | None = None,
) -> dict:
    """Time several implementations of one problem in interleaved rounds.

    All implementations share the same input sets (enough of them to cycle through several times
    the L2 size, see :func:`sets_for`); each is captured in its own CUDA graph. Then ``rounds``
    rounds: in each, every implementation in turn (in the orders of :func:`round_orders`,
    started at ``first_round``: by default a hash of the problem's name, so that the same
    implementation does not open every problem)
    gets ``warmup_replays`` untimed replays and ``reps`` timed ones. A drift of the GPU's clock or
    of its neighbours during the run then touches every implementation alike, and the ratio of
    two implementations can be taken round by round (:mod:`pearl_moe.bench.compare`).

    Returns ``{name: (Timing, config)}``; an implementation that fails to prepare or capture gets
    ``(exception, {})`` and the others go on. With ``verify``, each implementation's outputs are
    checked per input set after the replays (:func:`verify_outputs`; the references are shared).
    """
    import torch

    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    sets = sets_for(problem, l2, memory_cap_bytes)
    launches = max(launches, sets)
    inputs = [make_inputs(problem, device, seed + s) for s in range(sets)]
    timers: dict = {}
    results: dict = {}
    for name, impl in impls.items():
        try:
            timers[name] = capture(impl, problem, inputs, launches, device)
        except Exception as exc:
            if len(impls) == 1:
                raise
            results[name] = (exc, {})
            sync(device)
    names = list(timers)
    if first_round is None:
        first_round = zlib.crc32(problem.name.encode())
    timings = run_rounds(timers, rounds, reps, warmup_replays, first_round, device)
    refs: dict = {}
    for name in names:
        timer, timing = timers[name], timings[name]
        if verify:
            timing.outputs_ok, timing.outputs_message = verify_outputs(
                problem, inputs, timer.outputs, refs
            )
        results[name] = (timing, timer.config)
    del timers, refs
    return {name: results[name] for name in impls}


def run_rounds(
    timers: dict, rounds: int, reps: int, warmup_replays: int, first_round: int, device
) -> dict:
    """The interleaved rounds over captured graphs (``{name: GraphTimer}``): in round ``r`` every
    graph takes its turn in the order ``round_orders(names, rounds, first_round)[r]`` (untimed
    replays, then ``reps`` timed ones), the round's events read after one sync. Returns
    ``{name: Timing}`` (with ``after``, the graph timed just before in each round). Shared by the
    grouped-GEMM harness and the MoE layer's (:mod:`pearl_moe.bench.layer`)."""
    import torch

    names = list(timers)
    orders = round_orders(names, rounds, first_round)
    before = None
    for r in range(rounds):
        marks = []
        for name in orders[r]:
            timers[name].after.append(before)
            before = name
            timer = timers[name]
            marks.append((timer, queue_turn(timer, reps, warmup_replays)))
        torch.cuda.synchronize(device)
        for timer, events in marks:
            timer.rounds.append(turn_seconds(timer, events))
    out = {}
    for name in names:
        timer = timers[name]
        timing = Timing.from_rounds(timer.rounds, timer.launches, timer.sets)
        timing.after = list(timer.after)
        out[name] = timing
    return out


def time_impl(
    impl: Implementation,
    problem: GroupedProblem,
    reps: int = 20,
    launches: int = 10,
    device="cuda",
    seed: int = 100,
    memory_cap_bytes: int = 40 << 30,
    verify: bool = True,
) -> tuple[Timing, dict]:
    """Median/min/max time of one call of ``impl`` on ``problem`` (CUDA-graph replays).

    Input set ``i % sets`` feeds launch ``i`` of the graph. With ``verify``, each set's output
    is checked after the replays (:func:`verify_outputs`); the result is in ``Timing.outputs_ok``.
    One implementation alone: :func:`time_interleaved` with a single round of ``reps`` replays."""
    timing, config = time_interleaved(
        {impl.name: impl},
        problem,
        rounds=1,
        reps=reps,
        launches=launches,
        device=device,
        seed=seed,
        memory_cap_bytes=memory_cap_bytes,
        verify=verify,
        warmup_replays=0,
    )[impl.name]
    return timing, config


# -------------------------------------------------------------------------- ceilings, metrics
def _median_event_time(fn, reps: int, warmup: int = 3) -> list[float]:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stop = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps):
        start[r].record()
        fn()
        stop[r].record()
    torch.cuda.synchronize()
    return [start[r].elapsed_time(stop[r]) * 1e-3 for r in range(reps)]


def measure_ceilings(device="cuda", stream_bytes: int = 4 << 30, matmul_n: int = 8192) -> dict:
    """Measure the two ceilings on this GPU, now: read bandwidth and dense bf16 rate.

    * read: a sum over ``stream_bytes`` of random bf16 (reads everything once, writes almost
      nothing);
    * compute: ``torch.mm`` of two random ``matmul_n``-square bf16 matrices.

    The read ceiling is the fastest of ``torch.sum`` and a Triton streaming sum (where Triton is
    there): a grouped GEMM can read faster than ``torch.sum`` does, and a ceiling must not be beaten.
    The best repetition of each is the ceiling (it is what the GPU showed it can do); the median
    is recorded too.
    """
    import torch

    x = torch.randn(stream_bytes // 2, device=device, dtype=torch.bfloat16)
    nbytes = x.numel() * x.element_size()
    reads = {"torch.sum": _median_event_time(lambda: x.sum(), reps=15)}
    try:  # a second probe: a plain Triton streaming sum (torch.sum is not the fastest reader)
        from .triton_grouped import read_stream

        partial = read_stream(x)
        reads["triton read_stream"] = _median_event_time(lambda: read_stream(x, partial), reps=15)
    except Exception as exc:  # triton missing or failing: torch.sum alone
        reads_error = f"{type(exc).__name__}: {exc}"[:300]
    else:
        reads_error = None
    best_read = {name: nbytes / min(t) for name, t in reads.items()}
    read_name = max(best_read, key=best_read.get)
    t_read = reads[read_name]
    a = torch.randn((matmul_n, matmul_n), device=device, dtype=torch.bfloat16)
    b = torch.randn((matmul_n, matmul_n), device=device, dtype=torch.bfloat16)
    t_mm = _median_event_time(lambda: torch.mm(a, b), reps=20)
    flops = 2 * matmul_n**3
    torch.cuda.empty_cache()
    return {
        "read_bytes_per_s": nbytes / min(t_read),
        "read_bytes_per_s_median": nbytes / statistics.median(t_read),
        "read_method": f"fastest of {sorted(reads)} over {nbytes / 1e9:.2f} GB of random bf16 "
        f"(best of 15 each): {read_name}",
        "read_bytes_per_s_by_method": best_read,
        "read_probe_error": reads_error,
        "bf16_flops_per_s": flops / min(t_mm),
        "bf16_flops_per_s_median": flops / statistics.median(t_mm),
        "bf16_method": f"torch.mm {matmul_n}^3 bf16 on random data, best of 20",
    }


def with_demonstrated_read(ceilings: dict, problem: GroupedProblem, seconds: float) -> dict:
    """``ceilings`` with the read rate raised to what a run of ``problem`` in ``seconds`` showed.

    The live counterpart of :func:`pearl_moe.results.raise_read_ceiling`: a kernel that moved
    ``bytes_moved`` bytes in ``seconds`` demonstrated that rate, so a floor must not assume less.
    """
    demonstrated = problem.bytes_moved() / seconds
    if demonstrated <= ceilings["read_bytes_per_s"]:
        return ceilings
    probe = ceilings["read_bytes_per_s"]
    return {**ceilings, "read_bytes_per_s": demonstrated, "read_probe_bytes_per_s": probe}


def floor_seconds(problem: GroupedProblem, ceilings: dict) -> float:
    """max(bytes that must move / read bandwidth, FLOPs / bf16 rate)."""
    return problem.floor_seconds(ceilings["read_bytes_per_s"], ceilings["bf16_flops_per_s"])


def metrics(problem: GroupedProblem, seconds: float, ceilings: dict) -> dict:
    """Achieved TB/s over the bytes that must move, TFLOP/s, and % of the floor (floor / time)."""
    floor = floor_seconds(problem, ceilings)
    return {
        "tb_per_s": problem.bytes_moved() / seconds / 1e12,
        "tflop_per_s": problem.flops / seconds / 1e12,
        "floor_us": floor * 1e6,
        "pct_of_floor": 100.0 * floor / seconds,
        "bound": "memory"
        if problem.bytes_moved() / ceilings["read_bytes_per_s"]
        >= problem.flops / ceilings["bf16_flops_per_s"]
        else "compute",
    }
