"""Checks on the course's prose shared by the notebook tests and the docs tests: run history,
relative links, the notebooks' first cell and their ``# Expected output`` blocks.

Not a test module: ``test_notebooks.py`` and ``test_docs.py`` import it (``tests/`` is on the path
as for ``fake_cuda``)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

#: Phrases that tell how something was found, not what is true: they belong in
#: experiments/README.md (cited in one sentence), never in a lesson, the README or docs/.
HISTORY_PHRASES = (
    r"earlier run",
    r"in an earlier",
    r"went from",
    r"was settled",
    r"not yet",
    r"git show",
    r"first held-out run",
    r"was added after",
    r"predates",
    r"has since",
    r"have since",
    r"no longer",
    r"(?<!is )(?<!are )(?<!be )(?<!was )(?<!were )\bused to\b",
    r"since the run",
    r"changed since",
    r"timed again",
)
HISTORY = re.compile(r"\b(?:" + "|".join(HISTORY_PHRASES) + r")\b", re.I)
#: A commit hash: 7-40 hex digits with at least one letter and one digit.
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
ISO_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")

_GENERATED = re.compile(r"<!-- ([\w-]+):begin -->\n.*?<!-- \1:end -->", re.S)
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def strip_generated(text: str) -> str:
    """``text`` without its generated blocks (a run's date and its list of picks that moved
    are data there, not history)."""
    return _GENERATED.sub("", text)


def strip_code(text: str) -> str:
    """``text`` without fenced code blocks and inline code."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def history_hits(text: str) -> list[str]:
    """Every run-history phrase, commit hash and ISO date in the prose of ``text`` (markdown;
    generated blocks left out; a hash or a date in code counts too, a phrase in code does not)."""
    prose = strip_generated(text)
    hits = [m.group(0) for m in HISTORY.finditer(strip_code(prose))]
    hits += [f"commit hash {m.group(0)}" for m in COMMIT_HASH.finditer(prose)]
    hits += [f"date {m.group(0)}" for m in ISO_DATE.finditer(prose)]
    return hits


# ---------------------------------------------------------------------------- links
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_LINK = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.I)


def links(text: str) -> list[str]:
    """The link targets of markdown ``text`` (inline links, images, HTML ``src``/``href``),
    outside code."""
    prose = _FENCE.sub("", text)
    prose = _INLINE_CODE.sub("", prose)
    return [m.group(1) for m in _LINK.finditer(prose)] + [
        m.group(1) for m in _HTML_LINK.finditer(prose)
    ]


def _slug(text: str) -> str:
    """A heading or an anchor reduced to what both GitHub's and JupyterLab's anchors keep."""
    text = re.sub(r"[*_`]", "", text).strip().lower().replace(" ", "-")
    return re.sub(r"[^0-9a-z\-]", "", unquote(text))


def headings_of(path: Path) -> set[str]:
    """The anchors (as :func:`_slug`) of the headings of a markdown file or a notebook."""
    if path.suffix == ".ipynb":
        import json

        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    text = _FENCE.sub("", text)
    found = {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}
    found |= {_slug(m.group(1)) for m in re.finditer(r"<a\s+(?:id|name)=\"([^\"]+)\"", text)}
    return found


def broken_links(text: str, base: Path, root: Path) -> list[str]:
    """The relative links of ``text`` (a file in folder ``base``) that do not resolve: a missing
    file, a path outside the repository ``root``, or an anchor no heading of the target (a
    markdown file or a notebook; this file for ``#anchor``) has."""
    broken = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        path = (base / unquote(path_part)).resolve() if path_part else None
        if path is not None:
            if not path.is_relative_to(root.resolve()):
                broken.append(f"{target} (outside the repository)")
                continue
            if not path.exists():
                broken.append(f"{target} (no such file)")
                continue
        if anchor and not re.fullmatch(r"L\d+(-L\d+)?", anchor):
            where = path
            if where is None or where.suffix in (".md", ".ipynb"):
                found = headings_of(where) if where is not None else _headings_of_text(text)
                if _slug(anchor) not in found:
                    broken.append(f"{target} (no heading #{anchor})")
    return broken


def _headings_of_text(text: str) -> set[str]:
    text = _FENCE.sub("", text)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


# ---------------------------------------------------------------------------- notebooks
LEAD_INS = ("You'll learn", "Runs on", "Assumes", "Time")
MACHINES = ("CPU", "Hopper", "Blackwell")


def first_cell_problems(source: str, minutes: int | None = None, runs_on: str | None = None):
    """What the first cell of a notebook lacks: an H1 title, then the lead-ins ``**You'll
    learn:**``, ``**Runs on:**`` (starting with the CPU), ``**Assumes:**`` and ``**Time:** ~NN
    min``, each at the start of its own line. With ``minutes`` / ``runs_on`` (the course map's),
    the time and the machines named must agree with them."""
    problems = []
    lines = source.replace("\u2019", "'").splitlines()
    if not lines or not re.match(r"# \S", lines[0]):
        problems.append("the first line is not an H1 title ('# ...')")
    paragraphs = {}
    for lead in LEAD_INS:
        at = [i for i, ln in enumerate(lines) if ln.startswith(f"**{lead}:**")]
        if len(at) != 1:
            problems.append(f"needs one line starting '**{lead}:**' (found {len(at)})")
            continue
        para = []
        for ln in lines[at[0] :]:
            if para and (not ln.strip() or ln.startswith("**")):
                break
            para.append(ln)
        paragraphs[lead] = " ".join(para).split(":**", 1)[1].strip()
    if "Runs on" in paragraphs:
        said = paragraphs["Runs on"]
        if not said.startswith("CPU"):
            problems.append("'**Runs on:**' must start with the CPU")
        named = {m for m in MACHINES if re.search(rf"\b{m}\b", _outside_brackets(said))}
        if runs_on is not None and named != set(runs_on.replace(" ", "").split("·")):
            problems.append(
                f"'**Runs on:**' names {sorted(named)}, the course map (doc_tables.STAGES) says "
                f"{runs_on!r}"
            )
    if "Time" in paragraphs:
        m = re.fullmatch(r"~(\d+) min\.?", paragraphs["Time"])
        if not m:
            problems.append(f"'**Time:**' must read '~NN min', not {paragraphs['Time']!r}")
        elif minutes is not None and int(m.group(1)) != minutes:
            problems.append(
                f"'**Time:** ~{m.group(1)} min' but the course map (doc_tables.STAGES) says "
                f"{minutes} min"
            )
    return problems


def _outside_brackets(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        depth += ch == "("
        if depth == 0:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)


def markdown_words(cells) -> int:
    """Words of a notebook's markdown cells, as the course counts them (``len(source.split())``)."""
    return sum(len(c["source"].split()) for c in cells if c["cell_type"] == "markdown")


def expected_blocks(source: str) -> list[list[str]]:
    """The ``# Expected output`` blocks of a code cell: for each, the comment lines that follow its
    first line (``#`` and one space removed), up to the first line that is not a comment."""
    blocks, current = [], None
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("# Expected output"):
            current = []
            blocks.append(current)
        elif current is not None and stripped.startswith("#"):
            current.append(stripped[1:].removeprefix(" "))
        else:
            current = None
    return blocks


def _pattern(line: str) -> re.Pattern:
    parts = re.split(r"\.\.\.|\u2026", " ".join(line.split()))
    return re.compile(".*".join(re.escape(p) for p in parts))


def unmatched_expected(expected: list[str], printed: str) -> str | None:
    """The first line of an expected block that the printed output lacks, in order, or None.

    Both sides are whitespace-normalized; ``...`` (or ``…``) inside a line matches anything; the
    expected lines must appear in the printed lines in the same order, each matching one whole
    printed line (lines the block leaves out are allowed)."""
    out = [" ".join(ln.split()) for ln in printed.splitlines()]
    out = [ln for ln in out if ln]
    at = 0
    for line in expected:
        if not line.strip():
            continue
        pattern = _pattern(line)
        while at < len(out) and not pattern.fullmatch(out[at]):
            at += 1
        if at == len(out):
            return line
        at += 1
    return None


def printed_text(outputs) -> str:
    """What a code cell printed: its stdout streams, then the plain text of its results."""
    parts = [o.get("text", "") for o in outputs if o.get("output_type") == "stream"
             and o.get("name") == "stdout"]  # fmt: skip
    for o in outputs:
        if o.get("output_type") in ("execute_result", "display_data"):
            parts.append("\n" + o.get("data", {}).get("text/plain", ""))
    return "".join(parts)
