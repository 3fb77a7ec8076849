"""Interactive explorers for the notebooks: occupancy of a workload, a config's SMEM budget, and
the latency model.

Each explorer is an ``ipywidgets.VBox`` (controls above an ``Output``), so a notebook shows it by
leaving it as the last expression of a cell. On every change it recomputes through the package's
models and redraws. The rendered picture goes into the Output as a PNG, which works the same in
Jupyter and headlessly, and the explorer keeps ``last_figure``, ``last_text`` and ``redraws`` so
tests (and curious readers) can see what it showed. A combination the models reject shows the
``ValueError`` message instead of a plot: the message *is* the lesson (e.g. why 64-row tiles need
1-CTA mode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipywidgets as w
from IPython.display import Image

from ..config import ARCHS, EPILOGUES, GemmConfig
from ..hardware import GPUS, get_gpu
from ..model.occupancy import occupancy, skewed_counts
from ..workloads import MODELS, GroupedProblem, get_model, make_problem
from .plots import figure_png, plot_config_budget, plot_occupancy_maps, plot_ring_depth_marked

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["OccupancyExplorer", "SmemBudgetExplorer", "LatencyExplorer"]

#: Tile shapes offered by the occupancy explorer: label -> (tile_m, tile_n, cta_group).
TILES: dict[str, tuple[int, int, int]] = {
    "64x64 (1-CTA)": (64, 64, 1),
    "64x128 (1-CTA)": (64, 128, 1),
    "128x128 (1-CTA)": (128, 128, 1),
    "128x256 (1-CTA)": (128, 256, 1),
    "256x256 (2-CTA)": (256, 256, 2),
    "256x512 (2-CTA)": (256, 512, 2),
}
TOKENS = tuple(2**i for i in range(0, 13))
EP_DEGREES = (1, 2, 4, 8, 16, 32)
ROUTINGS = ("balanced", "random", "skewed")
ROW = 4  # controls per row


class _Explorer(w.VBox):
    """Controls + Output; subclasses implement :meth:`_render` returning (figure, text)."""

    def __init__(self, controls: list[w.Widget]) -> None:
        self.output = w.Output()
        self.last_figure: Figure | None = None
        self.last_text: str = ""
        self.last_error: str | None = None
        self.redraws = 0
        rows = [w.HBox(controls[i : i + ROW]) for i in range(0, len(controls), ROW)]
        super().__init__([*rows, self.output])
        for control in controls:
            control.observe(self._on_change, names="value")
        self.redraw()

    def _on_change(self, _change) -> None:
        self.redraw()

    def _render(self) -> tuple[Figure, str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def redraw(self) -> None:
        """Recompute and replace the Output's content (a plot, or the error message)."""
        self.redraws += 1
        self.output.outputs = ()
        try:
            fig, text = self._render()
        except ValueError as err:
            self.last_figure = None
            self.last_error = self.last_text = str(err)
            self.output.append_stdout(f"not possible: {err}\n")
            return
        self.last_figure, self.last_text, self.last_error = fig, text, None
        self.output.append_display_data(Image(figure_png(fig)))
        if text:
            self.output.append_stdout(text + "\n")


class OccupancyExplorer(_Explorer):
    """Model, tokens per GPU, EP degree, tile shape, GPU and routing -> naive vs grouped maps.

    ``routing`` is balanced (rows spread evenly), random (uniform picks) or skewed; with skewed
    routing the ``skew`` slider sets how fast expert popularity falls (``rank ** -skew``): hot
    experts get many m tiles, cold ones none, and the grouped launch's waves change with them.
    """

    def __init__(
        self,
        model: str = "GLM 5.3",
        tokens: int = 64,
        ep: int = 8,
        tile: str = "64x64 (1-CTA)",
        gpu: str = "B200",
        routing: str = "balanced",
        skew: float = 1.2,
    ) -> None:
        self.model = w.Dropdown(options=list(MODELS), value=model, description="model")
        self.tokens = w.SelectionSlider(
            options=list(TOKENS), value=tokens, description="tokens/GPU"
        )
        self.ep = w.Dropdown(options=list(EP_DEGREES), value=ep, description="EP")
        self.tile = w.Dropdown(options=list(TILES), value=tile, description="tile")
        self.gpu = w.Dropdown(options=list(GPUS), value=gpu, description="GPU")
        self.routing = w.Dropdown(options=list(ROUTINGS), value=routing, description="routing")
        self.skew = w.FloatSlider(
            value=skew, min=0.0, max=3.0, step=0.1, description="skew", continuous_update=False
        )
        super().__init__(
            [self.model, self.tokens, self.ep, self.tile, self.gpu, self.routing, self.skew]
        )

    def problem(self) -> GroupedProblem:
        """The grouped problem the controls describe (skewed routing uses the skew slider)."""
        if self.routing.value != "skewed":
            return make_problem(
                self.model.value, self.tokens.value, self.ep.value, self.routing.value
            )
        m = get_model(self.model.value)
        k, n = m.shape()
        local = m.local_experts(self.ep.value)
        counts = skewed_counts(self.tokens.value, local, min(m.top_k, local), self.skew.value)
        return GroupedProblem(k=k, n=n, counts=counts, name=f"{m.name} skew {self.skew.value}")

    def _render(self) -> tuple[Figure, str]:
        tile_m, tile_n, cta_group = TILES[self.tile.value]
        problem = self.problem()
        occ = occupancy(problem, (tile_m, tile_n), cta_group, self.gpu.value)
        if self.routing.value == "balanced":
            return plot_occupancy_maps(occ), occ.summary()
        counts = problem.counts
        routing = f"routing: {self.routing.value}" + (
            f" (skew {self.skew.value:.1f})" if self.routing.value == "skewed" else ""
        )
        routing += (
            f"; rows per expert {min(counts)}..{max(counts)}, "
            f"{sum(1 for c in counts if c == 0)} of {len(counts)} experts without rows"
        )
        return plot_occupancy_maps(occ), occ.summary() + "\n" + routing


class SmemBudgetExplorer(_Explorer):
    """GemmConfig knobs -> the shared-memory bars and (on sm_100a) the TMEM column map.

    The GPU control pairs a target with a machine: an sm_100a kernel on an H200 (or a 2-CTA tile,
    or acc_slots=2 on a Hopper tile whose accumulator does not fit one warpgroup's registers) is refused with the reason instead of a plot.
    """

    def __init__(self, config: GemmConfig | None = None, gpu: str | None = None) -> None:
        c = config or GemmConfig()
        self.arch = w.Dropdown(options=list(ARCHS), value=c.arch, description="arch")
        self.gpu = w.Dropdown(
            options=["B200", "H200"],
            value=gpu or ("B200" if c.arch == "sm_100a" else "H200"),
            description="GPU",
        )
        self.tile_m = w.Dropdown(
            options=[8, 16, 32, 64, 128, 192, 256], value=c.tile_m, description="tile_m"
        )
        self.tile_n = w.Dropdown(
            options=[64, 128, 192, 256, 512], value=c.tile_n, description="tile_n"
        )
        self.tile_k = w.Dropdown(options=[32, 64, 128], value=c.tile_k, description="tile_k")
        self.cta_group = w.Dropdown(options=[1, 2], value=c.cta_group, description="cta_group")
        self.b_k_tiles = w.Dropdown(options=[1, 2, 4], value=c.b_k_tiles, description="B K tiles")
        self.epilogue = w.Dropdown(
            options=list(EPILOGUES), value=c.epilogue, description="epilogue"
        )
        self.ring_depth = w.Dropdown(
            options=["auto", *range(2, 17)],
            value="auto" if c.ring_depth is None else c.ring_depth,
            description="ring_depth",
        )
        self.acc_buffers = w.Dropdown(
            options=["auto", 1, 2],
            value="auto" if c.acc_buffers is None else c.acc_buffers,
            description="acc_buffers",
        )
        self.acc_slots = w.Dropdown(options=[1, 2], value=c.acc_slots, description="acc_slots")
        self.store_bits = w.Dropdown(
            options=["widest", 128, 256],
            value="widest" if c.store_bits is None else c.store_bits,
            description="store_bits",
        )
        super().__init__(
            [
                self.arch,
                self.gpu,
                self.tile_m,
                self.tile_n,
                self.tile_k,
                self.cta_group,
                self.b_k_tiles,
                self.epilogue,
                self.ring_depth,
                self.acc_buffers,
                self.acc_slots,
                self.store_bits,
            ]
        )

    def config(self) -> GemmConfig:
        """The config the controls describe (raises ValueError if the hardware cannot run it)."""
        return GemmConfig(
            arch=self.arch.value,
            tile_m=self.tile_m.value,
            tile_n=self.tile_n.value,
            tile_k=self.tile_k.value,
            cta_group=self.cta_group.value,
            b_k_tiles=self.b_k_tiles.value,
            epilogue=self.epilogue.value,
            ring_depth=None if self.ring_depth.value == "auto" else self.ring_depth.value,
            acc_buffers=None if self.acc_buffers.value == "auto" else self.acc_buffers.value,
            acc_slots=self.acc_slots.value,
            store_bits=None if self.store_bits.value == "widest" else self.store_bits.value,
        )

    def _render(self) -> tuple[Figure, str]:
        from ..config import resolve, smem_budget

        config = self.config()
        gpu = get_gpu(self.gpu.value)
        if gpu.arch != config.arch:
            raise ValueError(
                f"the {gpu.name} runs {gpu.arch} code, not {config.arch}"
                + (
                    " (2-CTA tiles, TMEM and tcgen05 are Blackwell features)"
                    if gpu.arch == "sm_90a"
                    else ""
                )
            )
        resolved = resolve(config, gpu)
        budget = smem_budget(resolved, gpu)
        fig = plot_config_budget(resolved, gpu)
        text = f"{resolved.describe()} on the {gpu.name}\n{budget}"
        return fig, text


class LatencyExplorer(_Explorer):
    """The latency model (:mod:`pearl_moe.model.perfmodel`), knob by knob: modeled, never measured.

    Workload (model, tokens per GPU), GPU, tile rows, ring depth, and the two numbers Little's law
    is about: the memory latency of a ring entry and the HBM bandwidth. Draws modeled latency
    against ring depth (the current depth marked, the floor dashed) and prints what limits it and
    how the bytes in flight split between HBM and L2.
    """

    def __init__(
        self,
        model: str = "GLM 5.3",
        tokens: int = 64,
        gpu: str = "B200",
        tile_m: int = 128,
        ring_depth: int | str = "auto",
        latency_us: float | None = None,
        bandwidth_tb_s: float | None = None,
    ) -> None:
        from ..model.perfmodel import CALIBRATED, hbm_ceiling

        self.model = w.Dropdown(options=list(MODELS), value=model, description="model")
        self.tokens = w.SelectionSlider(
            options=list(TOKENS), value=tokens, description="tokens/GPU"
        )
        self.gpu = w.Dropdown(options=["B200", "H200"], value=gpu, description="GPU")
        self.tile_m = w.Dropdown(options=[64, 128], value=tile_m, description="tile_m")
        self.ring_depth = w.Dropdown(
            options=["auto", *range(2, 13)], value=ring_depth, description="ring_depth"
        )
        self.latency = w.FloatSlider(
            value=latency_us or CALIBRATED.memory_latency_s * 1e6,
            min=0.3,
            max=5.0,
            step=0.1,
            description="latency us",
            continuous_update=False,
        )
        self.bandwidth = w.FloatSlider(
            value=bandwidth_tb_s or hbm_ceiling(get_gpu(gpu), CALIBRATED) / 1e12,
            min=1.0,
            max=12.0,
            step=0.1,
            description="HBM TB/s",
            continuous_update=False,
        )
        super().__init__(
            [
                self.model,
                self.tokens,
                self.gpu,
                self.tile_m,
                self.ring_depth,
                self.latency,
                self.bandwidth,
            ]
        )

    def _on_change(self, change) -> None:
        """A new GPU brings its own HBM ceiling to the bandwidth slider (one redraw, not two):
        keeping the other GPU's bandwidth would model the H200 at the B200's 7 TB/s."""
        if getattr(self, "_syncing", False):
            return
        if change.get("owner") is self.gpu:
            from ..model.perfmodel import CALIBRATED, hbm_ceiling

            self._syncing = True
            try:
                self.bandwidth.value = round(
                    hbm_ceiling(get_gpu(self.gpu.value), CALIBRATED) / 1e12, 1
                )
            finally:
                self._syncing = False
        self.redraw()

    def config(self) -> GemmConfig:
        gpu = get_gpu(self.gpu.value)
        return GemmConfig(
            arch=gpu.arch,
            tile_m=self.tile_m.value,
            epilogue="direct_store",
            ring_depth=None if self.ring_depth.value == "auto" else self.ring_depth.value,
        )

    def _render(self) -> tuple[Figure, str]:
        from ..config import max_ring_depth, resolve
        from ..model.perfmodel import CALIBRATED, bytes_in_flight, predict

        gpu = get_gpu(self.gpu.value)
        params = CALIBRATED.with_(memory_latency_s=self.latency.value * 1e-6)
        bandwidth = self.bandwidth.value * 1e12
        problem = make_problem(self.model.value, self.tokens.value)
        config = resolve(self.config(), gpu)  # raises if the ring does not fit
        deepest = max_ring_depth(config.with_(ring_depth=None), gpu)
        depths = list(range(2, deepest + 1))
        preds = [
            predict(problem, config.with_(ring_depth=d), gpu, params=params,
                    hbm_bytes_per_s=bandwidth)
            for d in depths
        ]  # fmt: skip
        now = predict(problem, config, gpu, params=params, hbm_bytes_per_s=bandwidth)
        fig = plot_ring_depth_marked(
            [(d, p.seconds) for d, p in zip(depths, preds, strict=True)],
            config.ring_depth,
            now.seconds,
            now.floor_seconds,
            label=f"{config.tile_m}-row tile, modeled",
            title=f"{gpu.name}, modeled (pearl_moe.model.perfmodel): {problem.name.split(' gate')[0]}, "
            f"{self.tokens.value} tokens/GPU",
        )
        b = bytes_in_flight(problem, config, gpu)
        text = (
            f"modeled {now.seconds * 1e6:.0f} us on {gpu.name} ({now.fraction_of_floor:.0%} of its "
            f"floor), limited by {now.bound}; loaded latency {now.loaded_latency_s * 1e6:.2f} us "
            f"(unloaded {self.latency.value:.2f} us)\n{b.describe()}"
        )
        return fig, text
