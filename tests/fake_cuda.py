"""A fake CUDA runtime for CPU tests of the benchmark harness (imported by test modules)."""

from __future__ import annotations

import contextlib
import types

import torch

from pearl_moe.bench import harness


class FakeCuda:
    """Just enough of torch.cuda for the harness: graphs whose replay advances a fake clock by the
    cost of the calls captured, times a drift factor of the clock (a GPU slowly heating up)."""

    def __init__(self, drift=lambda t: 1.0):
        self.t = 0.0
        self.capturing = None
        self.drift = drift
        self.replays = []  # (graph name, start time) in order

    def install(self, monkeypatch):
        fake = self

        class Graph:
            def __init__(self):
                self.cost = 0.0
                self.name = None

            def replay(self):
                fake.replays.append((self.name, fake.t))
                fake.t += self.cost * fake.drift(fake.t)

        @contextlib.contextmanager
        def graph(g):
            fake.capturing = g
            try:
                yield
            finally:
                fake.capturing = None

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                self.t = fake.t

            def elapsed_time(self, other):
                return (other.t - self.t) * 1e3

        stream = types.SimpleNamespace(wait_stream=lambda other: None, cuda_stream=0)
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(cuda, "graph", graph)
        monkeypatch.setattr(cuda, "Event", Event)
        monkeypatch.setattr(cuda, "Stream", lambda device=None: stream)
        monkeypatch.setattr(cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(cuda, "current_stream", lambda device=None: stream)
        monkeypatch.setattr(cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(cuda, "empty_cache", lambda: None)
        monkeypatch.setattr(
            cuda,
            "get_device_properties",
            lambda device=None: types.SimpleNamespace(L2_cache_size=1 << 20),
        )
        return self

    def impl(self, name: str, seconds: float, broken: bool = False):
        """A correct implementation (per-expert torch.mm) that 'costs' ``seconds`` per call."""
        fake = self

        def prepare(A, W, offsets, counts):
            def run(out):
                start = 0
                for e, c in enumerate(counts):
                    if c and not (broken and e == 0):
                        torch.mm(A[start : start + c], W[e].t(), out=out[start : start + c])
                    start += c
                if fake.capturing is not None:
                    fake.capturing.cost += seconds
                    fake.capturing.name = name
                return out

            return harness.Prepared(run, {"seconds": seconds})

        return harness.Implementation(name, prepare)


def guard_prepared_state(monkeypatch):
    """Make ``harness.run_rounds`` (the interleaved replays) fail if anything registered with the
    returned ``keep(obj)`` was freed before the replays: what a prepared call allocates must live
    as long as its CUDA graph, which holds raw addresses. Returns ``keep``."""
    import gc
    import weakref

    alive = []
    real_run_rounds = harness.run_rounds

    def run_rounds(*args, **kwargs):
        gc.collect()
        assert alive and all(ref() is not None for ref in alive), "freed before the replays"
        return real_run_rounds(*args, **kwargs)

    monkeypatch.setattr(harness, "run_rounds", run_rounds)
    return lambda obj: alive.append(weakref.ref(obj))


def install_fake_gpu(monkeypatch, name="NVIDIA B200", capability=(10, 0), sms=148):
    """Make torch (and the package's target lookup) see one CUDA GPU of ``capability`` with
    ``sms`` SMs: what code that only *asks* about the GPU needs (the selftest's planning and
    bookkeeping). Nothing can launch on it. Returns the properties object."""
    from pearl_moe.kernels import targets

    props = types.SimpleNamespace(
        name=name, major=capability[0], minor=capability[1], multi_processor_count=sms,
        L2_cache_size=126 << 20, total_memory=180 << 30,
    )  # fmt: skip
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "device_count", lambda: 1)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(cuda, "get_device_name", lambda device=None: name)
    targets._capability.cache_clear()
    monkeypatch.setattr(targets, "_capability", lambda index: tuple(capability))
    return props
