"""Which kernel stage and configuration ``grouped_gemm`` runs when the caller names neither.

The choice uses only what the host knows without a device sync, so a call stays capturable in a
CUDA graph: the architecture, the GPU (its name, for the table), ``n``, ``k``, the expert count and
``rows = A.shape[0]``, i.e. the *average* rows per expert ``rows / experts`` (the per-expert counts
live on the device; reading them would need a copy).

Three sources, in order (:func:`pick`):

1. **A measured table per GPU**, ``pearl_moe/tuning/<GPU>.json``, written by
   ``python -m pearl_moe tune`` on that GPU. Entries are keyed by ``(n, k, experts, bucket)``, where
   the bucket is ``round(log2(rows / experts))`` (:func:`rows_bucket`: 1/4, 1/2, 1, 2, 4 ... rows per
   expert, one bucket per octave), and keep every candidate's time beside the winner. An entry whose
   stage is missing here or whose configuration the kernel refuses is skipped. A GPU also borrows
   its architecture's default GPU's table (:func:`table_gpus`: an H100 the H200's): its entry for
   the very shape is asked after the own table's entry and before the own table's vote.
2. **A vote of the nearest measured shapes** (:func:`neighbours`, :func:`vote`) for a shape or
   bucket the table does not hold: the table's nearest entries in (rows per expert, n, k, experts)
   score every candidate they timed, and the best score wins.
3. **A heuristic** (:func:`heuristic`) where nothing measured is near, from the H200
   measurements in ``shared/reference/facts.md``: at most one row per expert, 64 x 256 tiles
   (few active experts: fewer, wider tiles stream the weights with fewer tile prologues); up to 64
   rows per expert, 64 x 128 tiles (half the padded A bytes of a 128-row tile); above, the course's
   stage-3 configuration, 128 x 128. Always the deepest ring that fits (the depth sweep at 64 tokens
   only ever got faster with more entries: 748, 508, 463, 439, 425 us for 2-6 entries).

The environment variable ``PEARL_MOE_TUNING`` names another table file (``off``: heuristic only);
:func:`use_table` does the same inside a process. The tables are written by the lab: the tuner
(:mod:`pearl_moe.bench.tune`) times the configurations of :mod:`pearl_moe.bench.candidates`, and
:mod:`pearl_moe.bench.table_studies` judges the vote with a table's own measurements.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import ACTIVATIONS, GemmConfig
from .dispatch import can_implement
from .ladder import KERNEL_PACKAGES, KERNEL_STAGES, LAST_STAGE, kernel_module_name, stage_config

__all__ = [
    "Choice",
    "TABLE_SCHEMA",
    "TABLE_DIR",
    "ENV_TABLE",
    "rows_bucket",
    "gpu_name",
    "default_gpu_name",
    "heuristic",
    "pick",
    "pick_config",
    "activation_ready",
    "stage_available",
    "stage_for",
    "load_table",
    "table_gpus",
    "use_table",
    "table_key",
    "table_choice",
    "clear_cache",
    "neighbours",
    "vote",
    "relative_times",
    "m_tiles",
    "wave_cost",
    "wave_slots",
    "wave_width",
    "active_experts",
    "fuse_activation",
]

TABLE_SCHEMA = "pearl-moe-tuning/1"
TABLE_DIR = Path(__file__).resolve().parent.parent / "tuning"
ENV_TABLE = "PEARL_MOE_TUNING"
_DEFAULT_GPU = {"sm_90a": "H200", "sm_100a": "B200"}


@dataclass(frozen=True)
class Choice:
    """A kernel stage and its configuration, and where the choice came from."""

    stage: int
    config: GemmConfig
    source: str

    def as_tuple(self) -> tuple[int, GemmConfig]:
        return self.stage, self.config


# ------------------------------------------------------------------------------- keys
def rows_bucket(rows: int, experts: int) -> int:
    """``round(log2(rows / experts))``: the octave of the average rows per expert (an empty A
    counts as a quarter row per expert's bucket floor, -8)."""
    if experts < 1:
        raise ValueError("experts must be at least 1")
    if rows <= 0:
        return -8
    return max(-8, min(24, round(math.log2(rows / experts))))


def table_key(n: int, k: int, experts: int, bucket: int) -> str:
    return f"{n}x{k}x{experts}@{bucket}"


_GPU_NAMES: dict = {}


def short_gpu_name(full: str) -> str:
    """The name a tuning table goes by for a device named ``full`` ("NVIDIA H200" -> "H200"):
    the hardware catalogue's, else the name with "NVIDIA" dropped and spaces replaced."""
    from ..hardware import get_gpu

    try:
        return get_gpu(full).name
    except ValueError:
        return "_".join(full.replace("NVIDIA", "").split())


def gpu_name(device=None) -> str | None:
    """The short name of a CUDA device ("H200", "B200"; else its name with spaces replaced), cached
    per device index: a host-side query, no sync. None where it cannot be read (not a CUDA device);
    :func:`pick` then uses the architecture's default GPU."""
    import torch

    try:
        dev = torch.device(device) if device is not None else None
        if dev is not None and dev.type != "cuda":
            return None
        index = dev.index if dev is not None and dev.index is not None else None
        if index is None:
            index = torch.cuda.current_device()
        name = _GPU_NAMES.get(index)
        if name is None:
            name = _GPU_NAMES[index] = short_gpu_name(torch.cuda.get_device_name(index))
        return name
    except (RuntimeError, AssertionError, ValueError):
        return None


def default_gpu_name(arch: str) -> str:
    """The GPU whose table serves ``arch`` when the caller names none (sm_90a: H200)."""
    return _DEFAULT_GPU[arch]


# ------------------------------------------------------------------------- availability
def stage_available(arch: str, stage: int) -> bool:
    """Whether ``pearl_moe.kernels.<arch>.<stage module>`` exists here (without importing it)."""
    if stage not in KERNEL_STAGES or arch not in KERNEL_PACKAGES:
        return False
    name = kernel_module_name(arch, stage)
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _refusals(config: GemmConfig, stage: int, n: int | None, k: int | None) -> list[str]:
    """Why ``stage`` cannot run ``config`` here (empty: it can): its kernel module is missing
    (:func:`stage_available`), or the kernel refuses it at ``(n, k)``
    (:func:`pearl_moe.kernels.dispatch.can_implement`; ``n``, ``k`` None: at any shape)."""
    if not stage_available(config.arch, stage):
        return [f"stage {stage} has no {config.arch} kernel here"]
    return can_implement(config, stage, n, k)


def stage_for(config: GemmConfig, n: int | None = None, k: int | None = None) -> int:
    """The first course stage from 3 on that runs ``config`` here (:func:`_refusals`).
    ``ValueError`` with every stage's reasons if none."""
    reasons = []
    for stage in range(3, LAST_STAGE + 1):
        problems = _refusals(config, stage, n, k)
        if not problems:
            return stage
        reasons.append(f"stage {stage}: {'; '.join(problems)}")
    raise ValueError(f"no kernel stage here runs {config.describe()}: " + " | ".join(reasons))


# ------------------------------------------------------------------------------ heuristic
def heuristic(arch: str, n: int, k: int, experts: int, rows: int) -> Choice:
    """A configuration from the average rows per expert (see the module docstring); stage 3."""
    per_expert = rows / experts if experts else 0.0
    if arch == "sm_90a":
        if per_expert <= 1:
            tile, why = (64, 256), "<= 1 row per expert"
        elif per_expert <= 64:
            tile, why = (64, 128), "<= 64 rows per expert"
        else:
            tile, why = (128, 128), "> 64 rows per expert"
        config = stage_config(arch, 3).with_(tile_m=tile[0], tile_n=min(tile[1], max(n, 64)))
        if _refusals(config.resolved(), 3, n, k):
            config, why = stage_config(arch, 3), "course stage 3 (the tile above does not fit)"
    else:  # sm_100a: not measured yet; the course's stage-3 configuration
        config, why = stage_config(arch, 3), "course stage 3 (no sm_100a measurements yet)"
    return Choice(3, config.resolved(), f"heuristic: {why}")


# ---------------------------------------------------------------------------------- table
_TABLE_OVERRIDE: dict = {}  # {"path": ...} or {"table": ...} set by use_table
_TABLES: dict = {}
_PICKS: dict = {}
#: Memoized :func:`fuse_activation` answers, by (arch, gpu, n, k, experts, rows).
_FUSES: dict = {}


def clear_cache() -> None:
    """Forget loaded tables and memoized picks (after a table file changed)."""
    _TABLES.clear()
    _PICKS.clear()
    _FUSES.clear()


def use_table(table: str | Path | dict | None) -> None:
    """Use this table (a path, a loaded dict, or None for the default lookup) in this process."""
    _TABLE_OVERRIDE.clear()
    if isinstance(table, dict):
        _validate_table(table, "<dict>")
        _TABLE_OVERRIDE["table"] = table
    elif table is not None:
        _TABLE_OVERRIDE["path"] = Path(table)
    clear_cache()


def _validate_table(table: dict, where: str) -> dict:
    if table.get("schema") != TABLE_SCHEMA:
        raise ValueError(f"{where}: not a {TABLE_SCHEMA} table (schema={table.get('schema')!r})")
    for key in ("gpu", "arch", "entries"):
        if key not in table:
            raise ValueError(f"{where}: missing {key!r}")
    for e in table["entries"]:
        for key in ("n", "k", "experts", "bucket", "stage", "config"):
            if key not in e:
                raise ValueError(f"{where}: entry {e} lacks {key!r}")
    return table


def table_path(gpu: str) -> Path | None:
    """The file :func:`load_table` reads for ``gpu`` (None: tables are off): :func:`use_table`'s
    path, else ``$PEARL_MOE_TUNING``, else ``pearl_moe/tuning/<gpu>.json`` (it may not exist)."""
    env = os.environ.get(ENV_TABLE, "").strip()
    if "path" in _TABLE_OVERRIDE:
        return _TABLE_OVERRIDE["path"]
    if env.lower() in ("off", "none", "0"):
        return None
    return Path(env) if env else TABLE_DIR / f"{gpu}.json"


def load_table(gpu: str) -> dict | None:
    """The tuning table for ``gpu`` (None if there is none): :func:`use_table`'s, else the file
    ``$PEARL_MOE_TUNING`` names (``off``: none), else ``pearl_moe/tuning/<gpu>.json``."""
    if "table" in _TABLE_OVERRIDE:
        table = _TABLE_OVERRIDE["table"]
        return table if table.get("gpu") == gpu else None
    if gpu in _TABLES:
        return _TABLES[gpu]
    path = table_path(gpu)
    table = None
    if path is not None and path.is_file():
        table = _validate_table(json.loads(path.read_text()), str(path))
        if table["gpu"] != gpu:
            table = None
    _TABLES[gpu] = table
    return table


def table_gpus(arch: str, gpu: str) -> list[str]:
    """The GPUs whose tables serve ``gpu``, in the order :func:`pick` asks them: its own, then
    the architecture's default GPU's (:func:`default_gpu_name`: an H100 borrows the H200's) where
    that is a table for ``arch``. A shape the GPU's own table neither holds nor has measured
    neighbours for (a user's table of a few models, say) is served by the borrowed one.

    Borrowing keeps the kernels and the shared memory; the vote's wave arithmetic assumes the
    table's SM count (132: an H100 SXM's too, not a PCIe card's 114). What differs on an H100 is
    the memory (3.35 against 4.8 TB/s). A borrowed entry for the very shape comes before the own
    table's vote where both tables are of one SM count (:func:`pick`), as it does for
    :func:`fuse_activation`. Judged with the H100's own rounds on its 109 entries, the H200's
    entries for those shapes took 1.022x the fastest (geomean; at most 1.129x,
    :func:`pearl_moe.bench.table_studies.transfer_regret`), the H100's vote with the entry's
    model hidden 1.029x (at most 1.205x,
    :func:`pearl_moe.bench.table_studies.leave_one_model_out`): the vote is the better of the two
    about as often as not (34 against 30, 44 within 1%), the borrowed entry misses by less. On the
    course's Kimi K3 gate+up at 1024 tokens, which only the H200 tuned, the H100's vote picked a 64
    x 128 split-accumulator tile that took 1.30x quack-tuned's time. Measured on an H100 with no
    table of its own (``results/H100/table_transfer.json.gz``: 69 course and held-out layers at 1,
    16 and 4096 tokens), the H200 table's picks took 0.936x the heuristic's time (paired rounds;
    0.52-1.11x). The H100 now has a table of its own for the whole tuning set (1 to 8192 tokens, 109
    entries): its vote serves every held-out shape, and the H200's entries serve the shapes only the
    H200 tuned (the course's)."""
    gpus = [gpu]
    fallback = _DEFAULT_GPU.get(arch)
    if fallback and fallback != gpu:
        table = load_table(fallback)
        if table is not None and table.get("arch") == arch:
            gpus.append(fallback)
    return gpus


def _entry_choice(entry: dict, arch: str, n: int, k: int, gpu: str) -> Choice | None:
    try:
        config = GemmConfig.from_dict(entry["config"])
    except (TypeError, ValueError):
        return None
    stage = int(entry["stage"])
    if config.arch != arch:
        return None
    config = config.resolved()
    if _refusals(config, stage, n, k):
        return None
    where = entry.get("measured_at") or f"{entry['bucket']}"
    return Choice(stage, config, f"table {gpu}: {where}")


def _table_entries(arch, n, k, experts, bucket, gpu, table: dict | None = None) -> list[dict]:
    """The GPU table's entries for this very shape and rows-per-expert bucket (``table``: that
    table given, instead of :func:`load_table`'s)."""
    table = load_table(gpu) if table is None else table
    if not table or table.get("arch") != arch:
        return []
    key = (n, k, experts, bucket)
    return [e for e in table["entries"] if (e["n"], e["k"], e["experts"], e["bucket"]) == key]


def table_choice(arch, n, k, experts, bucket, gpu, table: dict | None = None) -> Choice | None:
    for entry in _table_entries(arch, n, k, experts, bucket, gpu, table):
        choice = _entry_choice(entry, arch, n, k, gpu)
        if choice is not None:
            return choice
    return None


# ---------------------------------------------------------------------------- neighbours
#: How many measured shapes vote on a shape the table does not hold.
NEIGHBOURS = 4
#: An octave of n, k or the expert count counts this much against an octave of rows per expert.
SHAPE_WEIGHT = 0.5
#: Entries further than this (in the distance of :func:`shape_distance`) do not vote.
MAX_DISTANCE = 3.0
#: The relative time charged to a candidate at a neighbour that did not time it.
UNTIMED = 1.10
#: Rows per expert below this count as this (1, 2 or 4 active experts look alike below it).
MIN_ROWS_PER_EXPERT = 1 / 8


def shape_point(n: int, k: int, experts: int, rows_per_expert: float) -> tuple[float, ...]:
    """A shape as a point: log2 of rows per expert, and log2 of n, k and experts scaled by
    :data:`SHAPE_WEIGHT` (rows per expert decides the tile height, the rest the finer choices)."""
    rpe = max(rows_per_expert, MIN_ROWS_PER_EXPERT)
    w = SHAPE_WEIGHT
    return (math.log2(rpe), w * math.log2(n), w * math.log2(k), w * math.log2(experts))


def shape_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return math.dist(a, b)


def _entry_point(entry: dict) -> tuple[float, ...]:
    rpe = entry.get("rows_per_expert", 2.0 ** entry["bucket"])
    return shape_point(entry["n"], entry["k"], entry["experts"], rpe)


def relative_times(entry: dict) -> dict[str, float]:
    """Each timed candidate's time over the entry's fastest (label -> ratio >= 1), from the pass
    that timed every candidate together; where the entry was also timed under skewed routing, the
    worse of the two ratios (its pick was the best worst case, and a vote should ask the same)."""
    rel: dict[str, float] = {}
    # every candidate was timed in the first pass; a second pass re-times only the finalists
    balanced = (entry.get("refined") or {}).get("first_pass") or entry.get("candidates")
    for times in (balanced, entry.get("skewed_candidates")):
        if not times:
            continue
        best = min(times.values())
        for label, t in times.items():
            rel[label] = max(rel.get(label, 0.0), t / best)
    if not rel:  # an entry with its pick only
        rel[
            f"s{entry['stage']} {entry.get('label') or GemmConfig.from_dict(entry['config']).describe()}"
        ] = 1.0
    return rel


def neighbours(table: dict, n: int, k: int, experts: int, rows: int) -> list[tuple[float, dict]]:
    """The :data:`NEIGHBOURS` table entries nearest this shape (within :data:`MAX_DISTANCE`),
    nearest first, as ``(distance, entry)``."""
    here = shape_point(n, k, experts, rows / experts)
    near = sorted(
        ((shape_distance(here, _entry_point(e)), i, e) for i, e in enumerate(table["entries"])),
        key=lambda t: t[:2],
    )
    return [(d, e) for d, _, e in near[:NEIGHBOURS] if d <= MAX_DISTANCE]


#: How a neighbour's time carries over when a candidate needs more (or fewer) m tiles per expert
#: here than there: times scale by the ratio of m tiles to this power (see :func:`vote`).
M_TILE_EXPONENT = 0.5


def m_tiles(rows_per_expert: float, tile_m: int) -> int:
    """m tiles an average expert's rows take (at least one)."""
    return max(1, math.ceil(rows_per_expert / tile_m))


#: How a neighbour's time carries over when a candidate's tiles fill the SMs' waves differently
#: here than there: times scale by the ratio of :func:`wave_cost` to this power (see :func:`vote`).
#: Chosen by :func:`pearl_moe.bench.table_studies.leave_one_model_out` on the H200 table (0: no
#: correction; 0.25 and 0.5 did about as well; 1.0, time proportional to waves, did worse: a
#: half-empty wave's SMs each pull more bandwidth).
WAVE_EXPONENT = 0.25


def wave_slots(tiles: int, sms: int) -> int:
    """SM slots ``tiles`` persistent tiles occupy: whole waves of ``sms`` (the last one padded)."""
    return -(-tiles // sms) * sms


def wave_cost(n: int, experts: int, rows_per_expert: float, config: GemmConfig, sms: int = 132):
    """SM slots a candidate's tiles occupy over the slots they use: ``waves x sms / tiles``
    (1.0: every wave full; 96 tiles on 132 SMs: 1.375).

    Balanced routing is assumed: from one row per expert on every expert is active; below it,
    ``rows`` experts hold one row each (the picker sees only the row count). A tile is one
    ``tile_m`` x ``tile_n`` block of one expert, as :class:`pearl_moe.kernels.scheduler.TileScheduler`
    numbers them; one persistent CTA per SM (sm_90a)."""
    rows = rows_per_expert * experts
    active = experts if rows_per_expert >= 1 else max(1, min(experts, round(rows)))
    per_active = max(1.0, rows / active)
    tiles = active * math.ceil(per_active / config.tile_m) * math.ceil(n / config.tile_n)
    return wave_slots(tiles, sms) / tiles


def wave_width(n: int, active: int, sms: int = 132) -> int:
    """The tile width (a multiple of 32 up to 256) whose decode tiles fill the SMs' waves best.

    At a few rows per expert a tile is one ``tile_n``-wide slice of one active expert's weights, so
    the work is ``active x ceil(n / tile_n)`` equal tiles. With fewer tiles than SMs some SMs idle
    (Qwen3-30B-A3B at 1 token: 8 experts x 1536 / 128 = 96 tiles on 132 SMs); just past a
    multiple of the SM count, a whole wave runs a few tiles. The pick maximizes the busy fraction
    ``tiles / (waves x sms)``, then the width (fewer, longer weight streams)."""

    def busy(width: int) -> float:
        tiles = active * -(-n // width)
        return tiles / wave_slots(tiles, sms)

    widths = [w for w in range(32, 257, 32) if w <= max(n, 32)]
    return max(widths, key=lambda w: (round(busy(w), 3), w))


def _carry_over(
    config: GemmConfig, here: tuple, entry: dict, there: float, sms: int,
    timed: GemmConfig | None = None,
) -> float:  # fmt: skip
    """The factor a neighbour's relative time of ``timed`` (default ``config``) is scaled by for
    ``config`` here (see :func:`vote`; the two differ for a wave twin, :func:`_wave_twins`);
    ``here`` is ``(n, experts or None, rows per expert)``, ``there`` the entry's rows per expert."""
    timed = config if timed is None else timed
    n, experts, rows_per_expert = here
    scale = (m_tiles(rows_per_expert, config.tile_m) / m_tiles(there, timed.tile_m)) ** (
        M_TILE_EXPONENT
    )
    if experts is not None:
        here_cost = wave_cost(n, experts, rows_per_expert, config, sms)
        there_cost = wave_cost(entry["n"], entry["experts"], there, timed, sms)
        scale *= (here_cost / there_cost) ** WAVE_EXPONENT
    return scale


def _runnable_label(label: str, arch: str, n: int, k: int) -> tuple[int, GemmConfig] | None:
    """``(stage, config)`` of a table label (``"s6 sm_90a 16x96x64 ..."``) where this shape's
    kernel can run it, else None."""
    stage_word, _, described = label.partition(" ")
    try:
        stage = int(stage_word.removeprefix("s"))
        config = GemmConfig.from_label(described).resolved()
    except ValueError:
        return None
    if config.arch != arch or _refusals(config, stage, n, k):
        return None
    return stage, config


#: Whether the vote carries a neighbour's wave-fitted tile over as this shape's own wave-fitted
#: tile (:func:`_wave_twins`); off, only the widths the neighbours timed are scored. A switch so
#: that ``experiments/wave_twin`` can judge both with the same code.
WAVE_TWINS = True
#: Rows per expert up to which the vote carries wave twins (:func:`_wave_twins`): at most one, where
#: only some experts are active and their tiles number about the SMs (see :func:`vote`). There A is
#: a row or two, so a tile's width changes only how the tiles fill the waves; with more rows it
#: also changes how often each expert's A rows are read again (once per n tile), which the carried
#: times do not model.
WAVE_TWIN_ROWS = 1.0


def active_experts(experts: int, rows_per_expert: float) -> int:
    """Active experts at ``rows_per_expert`` under balanced routing (the vote and the tuner's
    candidates, :func:`pearl_moe.bench.candidates.candidates`, count them so for
    :func:`wave_width`)."""
    return min(experts, max(1, round(rows_per_expert * experts)))


def _wave_twins(entry: dict, arch: str, n: int, k: int, width: int, sms: int) -> dict:
    """``{twin label: (label, config, (stage, twin config))}``: the candidates a decode neighbour
    timed (``label``, ``config``) at its own wave-fitted width (:func:`wave_width` of its ``n``
    and active experts), each with that width replaced by ``width``, this shape's (the deepest
    ring that fits; only where this shape's kernel runs it)."""
    there = entry.get("rows_per_expert", 2.0 ** entry["bucket"])
    if there > WAVE_TWIN_ROWS:
        return {}
    own = wave_width(entry["n"], active_experts(entry["experts"], there), sms)
    if own == width:
        return {}
    twins = {}
    for label in relative_times(entry):
        found = _runnable_label(label, arch, entry["n"], entry["k"])
        if found is None or found[1].tile_n != own:
            continue
        try:
            config = found[1].with_(tile_n=width, ring_depth=None).resolved()
            stage = stage_for(config, n, k)
        except ValueError:
            continue
        if not _refusals(config, stage, n, k):
            twins[f"s{stage} {config.describe()}"] = (label, found[1], (stage, config))
    return twins


def vote(
    near: list[tuple[float, dict]],
    arch: str,
    n: int,
    k: int,
    rows_per_expert: float,
    experts: int | None = None,
    sms: int = 132,
) -> list[tuple[float, int, GemmConfig]]:
    """Score every candidate the neighbours timed: the weighted geometric mean of its relative
    time over them (weight ``1 / (distance + 0.5)``; :data:`UNTIMED` where a neighbour did not
    time it). ``[(score, stage, config)]``, best first; candidates this shape's kernel cannot
    run are left out.

    A neighbour's relative time is carried over as measured when the candidate's tile takes as
    many m tiles per expert here as there. When it takes more here (a 32-row tile at 37 rows per
    expert needs two, at 32 rows one), every expert's weight tile is streamed again and another
    mostly padded tile computed, so the time is scaled by the ratio of m tiles to the power
    :data:`M_TILE_EXPONENT` (0.5: the second stream is partly served from L2); each neighbour's
    carried-over times are then taken relative to their fastest again. Without the
    scaling, a leave-one-layer-out test on the committed H200 table picked a 32-row tile for Kimi
    K3 at 256 tokens (37 rows per expert) that measured 1.37x the best there.

    Given this shape's ``experts``, times are also scaled by how well the candidate's tiles fill
    the SMs' waves here against there (:func:`wave_cost`, to the power :data:`WAVE_EXPONENT`):
    at n = 16384 a 96-column tile gives 8 active experts 1368 tiles (11 waves of 132 SMs, 94%
    full) but one active expert 171 (two waves, the second under a third full), while a
    128-column tile gives that expert 128 tiles, one wave. On the H200 table this took the
    leave-one-model-out regret at under one row per expert from 1.062 to 1.016 (all entries:
    1.042 to 1.031).

    At up to one row per expert (:data:`WAVE_TWINS`, :data:`WAVE_TWIN_ROWS`: few active experts,
    their tiles about as many as the SMs) a neighbour's candidates at its own wave-fitted width
    (:func:`wave_width`: 224 columns for n = 12800 over two active experts, 160 for 5120 over
    eight) also stand for the same tile at this shape's wave-fitted width, with the neighbour's
    time carried over by the m-tile and wave terms above (where the neighbour timed that width
    itself, its own time counts). The tuner times each shape's own wave width, so without this a
    width fitted to one shape's waves could only be voted for at shapes where the same width
    happens to fit. Judged by leave-one-model-out (``experiments/wave_twin``), it took the
    regret there from 1.017 to 1.011 on the H200 table (worst 1.124 to 1.073) and from 1.020 to
    1.015 on the H100's (worst 1.119 to 1.099), changing no pick for the worse. Carried up to 64
    rows per expert it also changed four H100 picks between 16 and 256 tokens, two of them for
    the worse (to 1.037 and 1.046 of the fastest, one a 32-column tile): with every expert active
    the tiles are many and a fuller last wave is worth little. It was written after the held-out
    run showed Phi-3.5-MoE's 1-token loss (a 128-column tile that fills 1.5 waves), so that run
    is no blind test of it."""
    runnable: dict[str, tuple[int, GemmConfig]] = {}
    for _, entry in near:
        for label in relative_times(entry):
            if label not in runnable:
                found = _runnable_label(label, arch, n, k)
                if found is not None:
                    runnable[label] = found
    width = None  # this shape's wave-fitted width, at decode
    if WAVE_TWINS and experts is not None and rows_per_expert <= WAVE_TWIN_ROWS:
        width = wave_width(n, active_experts(experts, rows_per_expert), sms)
    twins = [_wave_twins(e, arch, n, k, width, sms) if width else {} for _, e in near]
    for found in twins:
        for label, (_, _, twin) in found.items():
            runnable.setdefault(label, twin)
    rels = []
    for (d, entry), entry_twins in zip(near, twins, strict=True):
        there = entry.get("rows_per_expert", 2.0 ** entry["bucket"])

        here = (n, experts, rows_per_expert)
        times = relative_times(entry)
        carried = {
            label: rel * _carry_over(runnable[label][1], here, entry, there, sms)
            for label, rel in times.items()
            if label in runnable
        }
        for label, (source, timed, (_, twin)) in entry_twins.items():
            if label not in carried:  # the neighbour's own width, carried to this one
                carried[label] = times[source] * _carry_over(twin, here, entry, there, sms, timed)
        if carried:  # relative to the best carried-over time at this neighbour
            best = min(carried.values())
            rels.append((1.0 / (d + 0.5), {lb: t / best for lb, t in carried.items()}))
    total = sum(w for w, _ in rels)
    scored = []
    for label, (stage, config) in runnable.items():
        log_score = sum(w * math.log(rel.get(label, UNTIMED)) for w, rel in rels)
        scored.append((math.exp(log_score / total), stage, config))
    scored.sort(key=lambda t: (t[0], t[2].describe()))
    return scored


def fused_tile_multiple(arch: str) -> int:
    """The tile widths a fused gated activation takes are multiples of this: 32 on sm_90a (widths
    of 32 (2 b + 1) store their last two output groups 4 bytes a thread), 64 on sm_100a."""
    return 32 if arch == "sm_90a" else 64


def activation_ready(config: GemmConfig) -> bool:
    """Whether a fused gated activation runs on ``config`` with nothing else changed
    (:func:`pearl_moe.kernels.api.with_activation` changes the rest): the configuration takes
    one (``GemmConfig``'s rules: the direct store, tokens as rows, ...) at a tile width the fused
    epilogue takes (:func:`fused_tile_multiple`: on sm_90a 96 among them)."""
    try:
        config.with_(activation=ACTIVATIONS[0])
    except ValueError:
        return False
    return config.tile_n % fused_tile_multiple(config.arch) == 0


def _fastest_ready(rel: dict[str, float], arch, n, k) -> tuple[tuple, float] | None:
    """Of an entry's timed candidates (``rel``, :func:`relative_times`), the fastest that a fused
    activation runs as measured (:func:`activation_ready`): ``((stage, config), its relative
    time)``, or None."""
    for label, r in sorted(rel.items(), key=lambda t: (t[1], t[0])):
        found = _runnable_label(label, arch, n, k)
        if found is not None and activation_ready(found[1]):
            return found, r
    return None


def _fused_from_table(arch, n, k, experts, bucket, gpu) -> Choice | None:
    """For a fused activation: this shape's table entry's winner if it is :func:`activation_ready`,
    else the fastest candidate the entry timed among those that are (in the pass that timed them
    all); the winner's tile narrowed to a width the fused epilogue takes would be an untimed
    configuration."""
    for entry in _table_entries(arch, n, k, experts, bucket, gpu):
        winner = _entry_choice(entry, arch, n, k, gpu)
        if winner is not None and activation_ready(winner.config):
            return winner
        ready = _fastest_ready(relative_times(entry), arch, n, k)
        if ready is not None:
            (found, rel), where = ready, entry.get("measured_at") or f"{entry['bucket']}"
            return Choice(*found, f"table {gpu}: {where} (fastest timed tile a fused "
                                  f"activation runs as measured: {rel:.3f}x its best)")  # fmt: skip
    return None


#: What the activation as a pass of its own costs beside the gate+up GEMM: a fixed part in us and
#: a part per element of the GEMM's output in ps, fitted to the H200 layer run's step timings
#: (then 7.2-7.7 us at 1 token and 6.7-7.1 ps an element at 4096 tokens on all three course
#: models; the committed results/H200/moe_layer.json.gz: 7.4-7.5 us, 6.7-7.2 ps, 951-2696 us).
ACTIVATION_PASS_US, ACTIVATION_PS_PER_ELEMENT = 7.0, 7.0


def fuse_activation(
    arch: str, n: int, k: int, experts: int, rows: int, gpu: str | None = None
) -> bool:
    """Whether a gate+up GEMM should run its gated activation in the epilogue (else: the plain
    GEMM, then the activation as a pass of its own). Yes, unless this shape's table entry timed
    the fastest tile the fused picks use (:func:`activation_ready`) slower than the entry's own
    pick by more than that pass costs (:data:`ACTIVATION_PASS_US` and
    :data:`ACTIVATION_PS_PER_ELEMENT` for the ``rows x n`` outputs), or timed no such tile at
    all. Shapes the table does not hold fuse. A pure function of its arguments, memoized.

    What it weighs is the tile's width, where the fused epilogue does not take the winner's
    (swapped tiles; on sm_100a widths that are not multiples of 64). On the H200 table it fuses
    every course shape since the sm_90a fused epilogue takes multiples of 32: before, DeepSeek V4
    Pro at 1 token (a 96-wide winner, 2.9 waves of 132 SMs; the 128-wide tile, 2.2 waves, took
    1.09x: 11 us against the pass's 7) ran the pass, 211.4 us against 216.1 fused at 128 wide;
    fused at 96 wide it took 203.8. It leaves out what the fused epilogue itself costs at a
    given tile: with SiLU's division a hardware reciprocal (sm_90a), 0.995-1.003x the plain
    kernel in the step graphs (``experiments/fused_decode``; with the IEEE division it was up to
    1.09x). The pass it fits is the activation on ``[gate | up]``, not on the interleaved layout
    the unfused call then uses."""
    gpu = gpu or default_gpu_name(arch)
    bucket = rows_bucket(rows, experts)
    key = (arch, gpu, n, k, experts, rows)
    if key in _FUSES:
        return _FUSES[key]
    entries = []
    for source in table_gpus(arch, gpu):  # its own table's entry first, then a borrowed one's
        entries = _table_entries(arch, n, k, experts, bucket, source)
        if entries:
            break
    answer = True
    if entries:
        entry = entries[0]
        rel = relative_times(entry)
        ready = _fastest_ready(rel, arch, n, k)
        if ready is None or "median_us" not in entry:
            answer = ready is not None
        else:
            own = rel.get(f"s{entry['stage']} {entry.get('label')}", min(rel.values()))
            activation_us = ACTIVATION_PASS_US + rows * n * ACTIVATION_PS_PER_ELEMENT * 1e-6
            answer = entry["median_us"] * (ready[1] / own - 1.0) <= activation_us
    if len(_FUSES) >= MAX_PICKS:
        _FUSES.clear()
    _FUSES[key] = answer
    return answer


def _from_neighbours(arch, n, k, experts, rows, gpu, fused: bool = False) -> Choice | None:
    table = load_table(gpu)
    if not table or table.get("arch") != arch or not table["entries"]:
        return None
    near = neighbours(table, n, k, experts, rows)
    sms = table.get("sm_count", 132)
    scored = vote(near, arch, n, k, rows / experts, experts, sms) if near else []
    if fused:
        scored = [s for s in scored if activation_ready(s[2])]
    if not scored:
        return None
    score, stage, config = scored[0]
    kind = " among tiles a fused activation runs as measured" if fused else ""
    return Choice(
        stage,
        config,
        f"table {gpu}: vote of {len(near)} nearest measured shapes{kind} (score {score:.3f})",
    )


#: Most memoized picks kept (the vote depends on the exact row count; prefill calls vary it).
MAX_PICKS = 4096


def _entry_from(arch, n, k, experts, rows, gpu, fused) -> Choice | None:
    """``gpu``'s table entry for this very shape and bucket (None where it has none); for a fused
    activation, among the tiles that entry timed (a shape in the table keeps to its own timings)."""
    bucket = rows_bucket(rows, experts)
    exact = table_choice(arch, n, k, experts, bucket, gpu)
    if exact is None or not fused:
        return exact
    return _fused_from_table(arch, n, k, experts, bucket, gpu) or exact


def _vote_from(arch, n, k, experts, rows, gpu, fused) -> Choice | None:
    """The vote of ``gpu``'s table's nearest entries (None where none is near)."""
    ready = _from_neighbours(arch, n, k, experts, rows, gpu, fused=True) if fused else None
    return ready or _from_neighbours(arch, n, k, experts, rows, gpu)


def _sources(arch: str, gpu: str) -> list[tuple[str, object]]:
    """The (table, kind of answer) pairs :func:`pick` asks in turn: an entry for the very shape
    from its own table, then from a borrowed one of the same SM count, before any vote (own,
    then borrowed); a borrowed table of another SM count comes after the own vote."""
    gpus = table_gpus(arch, gpu)
    own, borrowed = gpus[0], gpus[1:]
    own_table = load_table(own)
    sms = _sm_count(own_table)
    same = [b for b in borrowed if own_table is None or sms == _sm_count(load_table(b))]
    other = [b for b in borrowed if b not in same]
    return (
        [(own, _entry_from)]
        + [(b, _entry_from) for b in same]
        + [(own, _vote_from)]
        + [(b, _vote_from) for b in same]
        + [(b, f) for b in other for f in (_entry_from, _vote_from)]
    )


def _sm_count(table: dict | None) -> int | None:
    return None if table is None else table.get("sm_count", 132)


def pick(
    arch: str, n: int, k: int, experts: int, rows: int, gpu: str | None = None, fused: bool = False
) -> Choice:
    """The stage and configuration for this call, from the GPU's table: its entry for this very
    shape and rows-per-expert bucket, else the borrowed table's entry for it (:func:`table_gpus`,
    where both tables are of one SM count), else the vote of the nearest measured shapes
    (:func:`vote`) in its own table, then in the borrowed one; else :func:`heuristic`. A pure
    function of its arguments, memoized per (arch, gpu, n, k, experts, rows, fused): after the
    first call it is a dict lookup (the vote reads the exact rows per expert, so the key is not
    the bucket).

    ``fused``: for a gate+up GEMM with the activation in its epilogue. The table and the vote
    then choose among the timed candidates :func:`activation_ready` (so the fused kernel runs a
    tile that was measured, not the winner's tile narrowed to a width it takes); with none, the
    plain pick (the caller adapts it)."""
    gpu = gpu or default_gpu_name(arch)
    key = (arch, gpu, n, k, experts, rows, fused)
    choice = _PICKS.get(key)
    if choice is None:
        for source, answer in _sources(arch, gpu):  # entries before votes, own before borrowed
            choice = answer(arch, n, k, experts, rows, source, fused)
            if choice is not None:
                if source != gpu:
                    where = choice.source[len(f"table {source}") :]
                    choice = replace(choice, source=f"table {source} (for {gpu}){where}")
                break
        else:
            choice = heuristic(arch, n, k, experts, rows)
        if len(_PICKS) >= MAX_PICKS:
            _PICKS.clear()
        _PICKS[key] = choice
    return choice


def pick_config(
    arch: str, n: int, k: int, experts: int, rows: int, gpu: str | None = None, fused: bool = False
) -> tuple[int, GemmConfig]:
    """``(stage, GemmConfig)`` that :func:`pearl_moe.kernels.grouped_gemm` runs when given neither
    (``fused``: before the activation is added, see :func:`pick`)."""
    return pick(arch, n, k, experts, rows, gpu, fused).as_tuple()
