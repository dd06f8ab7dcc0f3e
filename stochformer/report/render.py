"""The report page: one self-contained HTML file (inline CSS, figures as base64 PNG, no scripts,
no external resources).

Nothing read from the cache is trusted: every string is escaped, every verdict is derived again
from the row's numbers (`verdict.recompute`), and every figure is decoded, checked as a PNG
and re-encoded ([`safe_png`][stochformer.report.render.safe_png]) or left out with a note."""

from __future__ import annotations

import base64
import binascii
import html
import io
import json
import re
from typing import Any, Optional

from ..measure.verdict import (
    ALT_RTOL,
    FAILS,
    FAMILY_LEVEL,
    HOLDS,
    HYPOTHESES,
    INCONCLUSIVE,
    MIN_SAMPLES,
    NOT_MEASURED,
    NOT_TESTABLE,
    RULES,
    UNDETERMINED,
    counts,
    recompute,
)

#: the largest figure accepted from the cache, in pixels (a PNG that expands beyond it is refused)
MAX_FIGURE_PIXELS = 50_000_000


def escape(text: Any) -> str:
    """Any value as HTML text (quotes escaped too, so it is safe inside attributes).

    Parameters
    ----------
    text : Any
        Any value (None: empty).

    Returns
    -------
    str
        Safe HTML.
    """
    return html.escape("" if text is None else str(text), quote=True)


def safe_png(data: Any) -> Optional[str]:
    """``data`` (base64 text) decoded, checked to be one PNG image of reasonable size, and
    re-encoded from its pixels; None when it is anything else.

    Parameters
    ----------
    data : Any
        Base64 text.

    Returns
    -------
    str or None
        The re-encoded PNG as base64.
    """
    from PIL import Image

    try:
        raw = base64.b64decode(str(data), validate=True)
        if not raw.startswith(b"\x89PNG\r\n\x1a\n"):
            return None
        with Image.open(io.BytesIO(raw), formats=["PNG"]) as img:
            if img.width * img.height > MAX_FIGURE_PIXELS:
                return None
            img.load()
            buf = io.BytesIO()
            img.save(buf, format="PNG")
    except (binascii.Error, ValueError, OSError, SyntaxError, Image.DecompressionBombError):
        return None
    return base64.b64encode(buf.getvalue()).decode("ascii")


#: an innermost braced exponent or index, ``^{…}`` / ``_{…}`` (no brace inside), a parenthesised
#: exponent ``^(N,L,m)`` (kept with its parentheses) or a one-character exponent ``^β``; indices
#: without braces are left alone (``energy_beta`` is a name, not c with index e)
_SCRIPT = re.compile(r"([\^_])\{([^{}]*)\}|\^(\([^()]*\)|[^\s{}^_(),;.&<>])")


def maths(text: Any) -> str:
    """Text with the pseudo-LaTeX of the claims typeset as HTML: escaped, then each ``^{…}`` as a
    superscript and each ``_{…}`` as a subscript (nested ones from the inside out), ``^x`` of one
    character and ``^(…)`` as a superscript.

    The page keeps no scripts and loads nothing, so formulas are set with ``<sup>``/``<sub>`` rather
    than KaTeX or MathJax; Unicode letters (λ̄', κ, ε) are already the symbols.

    Parameters
    ----------
    text : Any
        A claim, note or caption (``None`` gives the empty string).

    Returns
    -------
    str
        Safe HTML: ``maths("e^{−κ(1)(d−1)t/2}")`` is ``"e<sup>−κ(1)(d−1)t/2</sup>"``.
    """
    out = escape(text)
    while True:
        new = _SCRIPT.sub(lambda m: (f"<sup>{m.group(3)}</sup>" if m.group(3) is not None
                                     else f"<{'sup' if m.group(1) == '^' else 'sub'}>{m.group(2)}</"
                                          f"{'sup' if m.group(1) == '^' else 'sub'}>"), out)
        if new == out:
            return out
        out = new


def _seconds(x: Any) -> str:
    return f"{x:.1f} s" if isinstance(x, (int, float)) and not isinstance(x, bool) else "—"

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; color: #1d2329; background: #f6f7f9; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 60px; background: #fff; }
h1 { font-size: 1.7em; margin: 0.2em 0; } h2 { margin-top: 2.2em; border-bottom: 2px solid #dde2e7; padding-bottom: 4px; }
.meta, .small { color: #5b6570; font-size: 0.9em; }
.claim { border-left: 4px solid #3d7cc9; background: #f0f5fb; padding: 8px 14px; margin: 10px 0; font-size: 1.05em; }
table { border-collapse: collapse; margin: 10px 0; font-size: 0.9em; }
th, td { border: 1px solid #d6dbe0; padding: 4px 8px; text-align: right; vertical-align: top; }
th { background: #eef1f4; } td.q, th.q { text-align: left; }
.holds { background: #dff3e2; color: #17612a; font-weight: 600; }
.fails { background: #fbe3e1; color: #8f1d14; font-weight: 600; }
.none { background: #f1f1f1; color: #666; }
.inconclusive { background: #fff4d6; color: #7a5a00; font-weight: 600; }
.untestable { background: #e8eef6; color: #3b5573; font-weight: 600; }
.status-failed, .status-unavailable { background: #fbe3e1; border: 1px solid #e7b1ab; padding: 8px 12px; }
.status-not_run, .status-pending { background: #f4f4f4; border: 1px solid #ddd; padding: 8px 12px; }
figure { margin: 14px 0; } figure img { max-width: 100%; border: 1px solid #e3e6ea; }
figcaption { color: #444; font-size: 0.9em; margin-top: 4px; }
pre { background: #f7f8fa; border: 1px solid #e3e6ea; padding: 8px; overflow-x: auto; font-size: 0.82em; }
details { margin: 8px 0; } summary { cursor: pointer; color: #2c5d99; }
.howto { background: #fffbea; border: 1px solid #eedc9a; padding: 8px 16px; }
nav a { margin-right: 12px; }
"""

_VERDICT_CLASS = {HOLDS: "holds", FAILS: "fails", INCONCLUSIVE: "inconclusive", NOT_TESTABLE: "untestable",
                  NOT_MEASURED: "none", UNDETERMINED: "none"}
#: the verdicts counted in the summary, with their column heads
_COUNTED = ((HOLDS, "holds", "holds"), (FAILS, "does not hold", "fails"), (INCONCLUSIVE, "inconclusive", "inconclusive"),
            (NOT_TESTABLE, "not testable", "untestable"))


def fmt(x: Any) -> str:
    """A number with 4 significant digits (integers as they are); ``—`` for missing.

    Parameters
    ----------
    x : Any
        A number, None or text.

    Returns
    -------
    str
        Safe HTML.
    """
    if x is None:
        return "—"
    if isinstance(x, bool) or isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.4g}"
    return escape(str(x))


def _ci(ci: Optional[list]) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return "—"
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def _p(x: Any) -> str:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return "—"
    return f"{x:.2g}" if x >= 1e-3 else "< 0.001"


def _errors(r: dict) -> str:
    """A row's error rates: the family's false-failure rate and the power against the alternative."""
    if r.get("p_adjusted") is None:
        return "—"
    text = f"false failure ≤ {FAMILY_LEVEL:g} (family of {r.get('family', 1)})"
    if isinstance(r.get("power"), (int, float)):
        text += f"; power at a ≈ {r['power']:.2f}"
    return text


def comparison_table(rows: list[dict]) -> str:
    """The predicted-vs-measured table of a section (its rows judged as one family).

    Parameters
    ----------
    rows : list of dict
        The section's stored rows.

    Returns
    -------
    str
        The HTML table.
    """
    if not rows:
        return ""
    head = ("<tr><th class='q'>quantity</th><th class='q'>hypothesis</th><th>predicted</th><th>alternative a</th>"
            "<th>measured</th><th>95% CI</th><th>n</th><th>rule</th><th>tol</th><th>p</th><th>Holm p</th>"
            "<th class='q'>error rates</th><th>verdict</th><th class='q'>note</th></tr>")
    body = []
    judged = recompute(rows)
    for r in judged:
        cls = _VERDICT_CLASS.get(r["verdict"], "none")
        reach = f" (reach {fmt(r['reach'])})" if r.get("reach") is not None else ""
        body.append(
            f"<tr><td class='q'>{maths(r['quantity'])}</td><td class='q'>{maths(r.get('hypothesis', ''))}</td>"
            f"<td>{fmt(r['predicted'])}</td><td>{fmt(r.get('alternative'))}</td><td>{fmt(r['measured'])}</td>"
            f"<td>{_ci(r.get('ci'))}</td><td>{fmt(r.get('n'))}</td><td>{escape(r['rule'])}{escape(reach)}</td>"
            f"<td>{fmt(r['tol'])}</td><td>{_p(r.get('p_value'))}</td><td>{_p(r.get('p_adjusted'))}</td>"
            f"<td class='q'>{escape(_errors(r))}</td>"
            f"<td class='{cls}'>{escape(r['verdict'])}</td><td class='q'>{maths(r.get('note') or '')}</td></tr>"
        )
    family = max((r["family"] for r in judged if r.get("p_adjusted") is not None), default=0)
    level = (f"<p class='small'>The {family} tested rows of this section are one family: Holm's adjustment of their "
             f"p-values keeps the chance of any false “does not hold” at most {FAMILY_LEVEL:g}.</p>") if family else ""
    return f"<table>{head}{''.join(body)}</table>{level}"


def data_table(table: dict) -> str:
    """A further table of a section: ``{"title", "columns", "rows"}``.

    Parameters
    ----------
    table : dict
        ``{"title", "columns", "rows"}``.

    Returns
    -------
    str
        The HTML table.
    """
    head = "".join(f"<th>{escape(str(c))}</th>" for c in table["columns"])
    body = "".join("<tr>" + "".join(f"<td>{fmt(v)}</td>" for v in row) + "</tr>" for row in table["rows"])
    return f"<p><b>{escape(table.get('title', ''))}</b></p><table><tr>{head}</tr>{body}</table>"


def _count(rec: dict) -> dict[str, int]:
    return counts(recompute(rec.get("comparisons", [])))


def summary_table(records: list[dict]) -> str:
    """One line per section: status, run time and verdict counts.

    Parameters
    ----------
    records : list of dict
        The section records.

    Returns
    -------
    str
        The HTML table.
    """
    rows = []
    for rec in records:
        c = _count(rec)
        took = _seconds(rec.get("elapsed_s"))
        cells = "".join(f"<td class='{cls}'>{c[v]}</td>" for v, _, cls in _COUNTED)
        rows.append(
            f"<tr><td class='q'><a href='#{escape(rec['name'])}'>{escape(rec['title'])}</a></td>"
            f"<td class='q'>{escape(rec['spec'])}</td><td class='q'>{escape(rec['status'])}</td><td>{took}</td>{cells}</tr>"
        )
    heads = "".join(f"<th>{h}</th>" for _, h, _ in _COUNTED)
    head = f"<tr><th class='q'>section</th><th class='q'>SPEC</th><th class='q'>status</th><th>run time</th>{heads}</tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _json_block(obj: Any) -> str:
    return f"<pre>{escape(json.dumps(obj, indent=2, sort_keys=True))}</pre>"


def section(rec: dict) -> str:
    """The HTML of one section record (see ``runner.reproduce``).

    Parameters
    ----------
    rec : dict
        A section record.

    Returns
    -------
    str
        The HTML.
    """
    name = escape(rec["name"])
    parts = [f"<section id='{name}'><h2>{escape(rec['title'])} <span class='small'>({escape(rec['spec'])}; "
             f"<code>--only {name}</code>)</span></h2>",
             f"<div class='claim'><b>Claim.</b> {maths(rec['claim'])}</div>"]
    status = rec["status"]
    if status in ("failed", "unavailable", "not_run", "pending"):
        text = {
            "failed": "This section failed to run: ",
            "unavailable": "This section is not available: ",
            "not_run": "Not run in this report (run it with <code>stochformer reproduce --only "
                       f"{name}</code>).",
            "pending": "Not computed yet.",
        }[status]
        err = escape(rec.get("error") or "")
        parts.append(f"<p class='status-{status}'>{text}{err}</p>")
        if rec.get("traceback"):
            parts.append(f"<details><summary>traceback</summary><pre>{escape(rec['traceback'])}</pre></details>")
    else:
        when = rec.get("started_at", "")
        origin = "computed in this run" if status == "computed" else "reused from the cache (computed earlier with the same config, version and source)"
        prov = rec.get("provenance") or {}
        parts.append(f"<p class='meta'>Status: {origin}; started {escape(when)}; run time {_seconds(rec.get('elapsed_s'))}; "
                     f"device {escape(str(prov.get('device', '?')))}; stochformer {escape(str(prov.get('stochformer', '?')))}.</p>")
        if rec.get("cache_note"):
            parts.append(f"<p class='meta'>{escape(rec['cache_note'])}.</p>")
        for fig in rec.get("figures", []):
            png = safe_png(fig.get("png"))
            if png is None:
                parts.append(f"<p class='small'>Figure {escape(fig.get('name'))} left out: the stored image is not "
                             "a valid PNG.</p>")
                continue
            parts.append(f"<figure><img alt='{escape(fig.get('name'))}' src='data:image/png;base64,{png}'>"
                         f"<figcaption>{maths(fig.get('caption'))}</figcaption></figure>")
        parts.append(comparison_table(rec.get("comparisons", [])))
        parts.extend(data_table(t) for t in rec.get("tables", []))
        for note in rec.get("notes", []):
            parts.append(f"<p class='small'>{maths(note)}</p>")
        parts.append("<details><summary>exact config, seeds, versions</summary>"
                     f"<p class='small'>cache key {escape(str(rec.get('key')))}</p>"
                     f"<b>config</b>{_json_block(rec.get('config'))}<b>seeds</b>{_json_block(rec.get('seeds', {}))}"
                     f"<b>versions and device</b>{_json_block(prov)}</details>")
    if status in ("failed", "unavailable", "not_run", "pending") and rec.get("config") is not None:
        parts.append(f"<details><summary>config</summary>{_json_block(rec['config'])}</details>")
    parts.append("</section>")
    return "\n".join(parts)


HOWTO = (
    "Each section states one claim of the paper, shows the figure that tests it, and a table of "
    "<b>predicted</b> (theory, SPEC) against <b>measured</b> (simulation) values with 95% confidence "
    "intervals. Every row is a test: it states its <b>hypothesis</b> (by its rule, below), its p-value, "
    "and its error rates. The rows of a section are one family: a row <b>does not hold at this size</b> "
    f"when its Holm-adjusted p-value is below {FAMILY_LEVEL:g}, so a section whose claims are all true shows a "
    f"false failure at most {FAMILY_LEVEL:.0%} of the time. A row that is not rejected <b>holds</b> only if the data could "
    "have told the prediction from its stated <b>alternative</b> a (a wrong model's value, by default "
    f"p ± max({ALT_RTOL:g}·|p|, 2·tol)): when the interval's half-width exceeds the distance from the tolerance band "
    "to a (the test's power against a is then below one half), or when the row alone is significant but not in "
    "its family, the row is <b>inconclusive</b>; a “below”/“above” row is inconclusive when its interval "
    "contains p. A bound row is <b>not testable at this size</b> when the bound is beyond the reach of the "
    "observable (e.g. above the largest growth rate the energy can show from uniform tokens in the horizon). "
    f"An interval is never formed from fewer than {MIN_SAMPLES} samples (the row is inconclusive); means of n samples "
    "use Student's t, fractions Wilson's score interval, fitted exponents a bootstrap interval. Larger profiles "
    "(<code>--profile full</code>) shrink both the finite-size bias and the intervals. Every number on this page is in "
    "<code>results.json</code>; the exact config of each section is under its “exact config” fold."
)


def render_html(report: dict) -> str:
    """The whole page for ``report`` (the dict returned by ``runner.reproduce``).

    Parameters
    ----------
    report : dict
        The report.

    Returns
    -------
    str
        The self-contained HTML page.
    """
    records = report["sections"]
    prov = report.get("provenance", {})
    rules = "".join(f"<li><b>{escape(k)}</b> (H: {escape(HYPOTHESES[k])}): {escape(v)}</li>" for k, v in RULES.items())
    nav = "".join(f"<a href='#{escape(r['name'])}'>{escape(r['name'])}</a>" for r in records)
    state = "complete" if report.get("complete") else "incomplete (see the status of each section)"
    compute = sum(r["elapsed_s"] for r in records
                  if r["status"] in ("computed", "cached") and isinstance(r.get("elapsed_s"), (int, float)))
    return "\n".join([
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<link rel='icon' href='data:,'>",
        f"<title>{escape(report['title'])} ({escape(report['profile'])})</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<h1>{escape(report['title'])}</h1>",
        "<p class='meta'>Stochastic scaling limits and synchronisation by noise in deep transformer models "
        "(Agazzi, Bruno, Mosig García, Saviozzi, Romito, arXiv:2604.26898): every experiment of SPEC §6.</p>",
        f"<p class='meta'>Profile <b>{escape(report['profile'])}</b>: {escape(report['profile_description'])}. "
        f"Created {escape(report['created'])}; the sections' run times add up to {compute:.1f} s, this invocation "
        f"ran {report['elapsed_s']:.1f} s; report {state}. "
        f"stochformer {escape(report['version'])}, torch {escape(str(prov.get('torch')))}, "
        f"Python {escape(str(prov.get('python')))}, {escape(str(prov.get('platform')))}.</p>",
        f"<p class='meta'>Command: <code>{escape(report.get('command') or '')}</code></p>",
        f"<nav>{nav}</nav>",
        f"<div class='howto'><p><b>How to read this report.</b> {HOWTO}</p><ul>{rules}</ul>"
        "<p class='small'>p = predicted, θ = the true value, m = measured, [lo, hi] = 95% CI of the measurement, "
        "SE = the half of the CI facing p over its quantile (1.96, or Student's t with n − 1 degrees of freedom), "
        "Φ̄ = the upper tail. A row with no measurement is “not measured”; a non-finite measurement is "
        "“undetermined”.</p></div>",
        "<h2>Summary</h2>",
        summary_table(records),
        *[section(r) for r in records],
        "</main></body></html>",
    ])
