"""Interactive explorers for the notebooks: occupancy of a workload, and a config's SMEM budget.

Each explorer is an ``ipywidgets.VBox`` (controls above an ``Output``), so a notebook shows it by
leaving it as the last expression of a cell. On every change it recomputes through the package's
models and redraws. The rendered picture goes into the Output as a PNG, which works the same in
Jupyter and headlessly, and the explorer keeps ``last_figure``, ``last_text`` and ``redraws`` so
tests (and curious readers) can see what it showed. A combination the models reject shows the
``ValueError`` message instead of a plot: the message *is* the lesson (e.g. why 64-row tiles need
1-CTA mode).
"""

from __future__ import annotations

import ipywidgets as w
from IPython.display import Image
from matplotlib.figure import Figure

from .config import ARCHS, EPILOGUES, GemmConfig
from .hardware import GPUS
from .occupancy import occupancy
from .plots import figure_png, plot_occupancy_maps, plot_smem_budget, plot_tmem_map
from .workloads import MODELS, make_problem

__all__ = ["OccupancyExplorer", "SmemBudgetExplorer"]

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


class _Explorer(w.VBox):
    """Controls + Output; subclasses implement :meth:`_render` returning (figure, text)."""

    def __init__(self, controls: list[w.Widget]) -> None:
        self.output = w.Output()
        self.last_figure: Figure | None = None
        self.last_text: str = ""
        self.last_error: str | None = None
        self.redraws = 0
        super().__init__([w.HBox(controls[:4]), w.HBox(controls[4:]), self.output])
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
    """Model, tokens per GPU, EP degree, tile shape and GPU -> naive vs grouped occupancy maps."""

    def __init__(
        self,
        model: str = "GLM 5.3",
        tokens: int = 64,
        ep: int = 8,
        tile: str = "64x64 (1-CTA)",
        gpu: str = "B200",
    ) -> None:
        self.model = w.Dropdown(options=list(MODELS), value=model, description="model")
        self.tokens = w.SelectionSlider(
            options=list(TOKENS), value=tokens, description="tokens/GPU"
        )
        self.ep = w.Dropdown(options=list(EP_DEGREES), value=ep, description="EP")
        self.tile = w.Dropdown(options=list(TILES), value=tile, description="tile")
        self.gpu = w.Dropdown(options=list(GPUS), value=gpu, description="GPU")
        super().__init__([self.model, self.tokens, self.ep, self.tile, self.gpu])

    def _render(self) -> tuple[Figure, str]:
        tile_m, tile_n, cta_group = TILES[self.tile.value]
        problem = make_problem(self.model.value, self.tokens.value, self.ep.value)
        occ = occupancy(problem, (tile_m, tile_n), cta_group, self.gpu.value)
        return plot_occupancy_maps(occ), occ.summary()


class SmemBudgetExplorer(_Explorer):
    """GemmConfig knobs -> the shared-memory bars and (on sm_100a) the TMEM column map."""

    def __init__(self, config: GemmConfig | None = None) -> None:
        c = config or GemmConfig()
        self.arch = w.Dropdown(options=list(ARCHS), value=c.arch, description="arch")
        self.tile_m = w.Dropdown(options=[64, 128, 256], value=c.tile_m, description="tile_m")
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
        super().__init__(
            [
                self.arch,
                self.tile_m,
                self.tile_n,
                self.tile_k,
                self.cta_group,
                self.b_k_tiles,
                self.epilogue,
                self.ring_depth,
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
        )

    def _render(self) -> tuple[Figure, str]:
        from .budget import resolve, smem_budget

        resolved = resolve(self.config())
        budget = smem_budget(resolved)
        has_tmem = resolved.arch == "sm_100a"
        fig = Figure(figsize=(7.5, 4.6 if has_tmem else 3.6), layout="constrained")
        if has_tmem:
            top, bottom = fig.subfigures(2, 1, height_ratios=[3, 1.2])
            plot_smem_budget([resolved], ax=top.add_subplot())
            plot_tmem_map(resolved, ax=bottom.add_subplot())
        else:
            plot_smem_budget([resolved], ax=fig.add_subplot())
        text = f"{resolved.describe()}\n{budget}"
        return fig, text
