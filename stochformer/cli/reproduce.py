"""``stochformer reproduce``: every experiment of SPEC §6 into one self-contained HTML report."""

from __future__ import annotations


import click

from ..report.profiles import DEFAULT_PROFILE, PROFILES
from .common import (
    check_scheduler,
    command_line,
    disk_check,
    experiment_options,
    format_option,
    hold_output,
    interrupted_exit,
    print_config_and_exit,
    resume_command,
    size_check,
    stop_on_signals,
    use_agg,
)


def _listing() -> str:
    from ..report import registered

    lines = ["sections (--only NAME):"]
    lines += [f"  {s.name:<12s} {s.title} ({s.spec})" for s in registered()]
    lines += ["profiles (--profile NAME):"]
    lines += [f"  {name:<12s} {text}" for name, text in PROFILES.items()]
    return "\n".join(lines)


@click.command("reproduce", short_help='Run every experiment of SPEC §6 and write the HTML report with its verdicts.')
@click.option("--profile", type=click.Choice(list(PROFILES)), default=DEFAULT_PROFILE, show_default=True,
              help="Sizes of the experiments: tiny (CI), quick (<= 20 min on 2 CPU cores), full (the paper's), gpu (CUDA).")
@click.option("--only", multiple=True, metavar="NAME", help="Run only this section (repeatable); see --list.")
@click.option("--resume", is_flag=True, help="Reuse the finished sections stored in OUT/cache (same config, version and source).")
@click.option("--scheduler", default=None, metavar="SPEC",
              help="Where grids of independent runs go: serial (default), processes[:N], local-cluster:N or a Dask address.")
@click.option("--list", "list_only", is_flag=True, help="List the sections and profiles, then exit.")
@format_option
@experiment_options
def reproduce_cmd(profile, only, resume, scheduler, list_only, fmt, config_file, overrides, out, force, quiet) -> None:
    """Run every experiment of SPEC §6 and write OUT/index.html (default report/) and OUT/results.json,
    and every figure as OUT/figures/SECTION-FIGURE.FORMAT (--format; the page embeds the PNG).

    Overrides: --set SECTION.FIELD=VALUE changes one section (e.g. --set sync.L=500);
    --set FIELD=VALUE every section that has the field (e.g. --set seed=1)."""
    if list_only:
        click.echo(_listing())
        return
    stop_on_signals()
    out = "report" if out is None else out
    from ..config import ConfigError
    from ..io.outputs import OutputError, WriteError
    from ..report import reproduce
    from ..report.runner import check_report_folder, plan
    from ..measure.verdict import counts, recompute

    check_scheduler(scheduler)
    try:
        planned = plan(profile, only, overrides, config_file)
    except (ConfigError, OutputError) as exc:
        raise click.UsageError(str(exc)) from None
    print_config_and_exit({item.section.name: item.config for item in planned if item.selected and item.config is not None})
    try:
        out = check_report_folder(out, force)
    except (ConfigError, OutputError) as exc:
        raise click.UsageError(str(exc)) from None
    largest = None
    for item in planned:
        if item.selected and item.config is not None:
            try:
                estimate = size_check(item.config, scheduler)
            except click.UsageError as exc:
                raise click.UsageError(f"section {item.section.name}: {exc.message}") from None
            if estimate is not None and (largest is None or estimate.bytes > largest.bytes):
                largest = estimate
    disk_check(out, largest)
    hold_output(out, "reproduce")
    use_agg()
    kept = f"finished sections are kept in {out / 'cache'}; continue with: {resume_command(resume)}"
    try:
        report = reproduce(profile, out, only=only, resume=resume, overrides=overrides, config_file=config_file,
                           scheduler=scheduler, force=force, progress=not quiet, command=command_line(),
                           fmt=fmt)
    except WriteError as exc:
        raise click.ClickException(f"{exc}; {kept}") from None
    except (ConfigError, OutputError) as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"{exc.strerror or exc}: {exc.filename}; {kept}") from None
    except KeyboardInterrupt as exc:
        interrupted_exit(exc, kept)
    bad = [r for r in report["sections"] if r["status"] in ("failed", "unavailable")]
    for r in report["sections"]:
        rows = recompute(r.get("comparisons", []))
        extra = ", ".join(f"{n} {v}" for v, n in counts(rows).items() if n) if rows else r.get("error", "")
        click.echo(f"  {r['name']:<12s} {r['status']:<12s} {extra}")
    click.echo(f"report: {out / 'index.html'} ({report['elapsed_s']:.1f} s); numbers: {out / 'results.json'}")
    if bad:
        raise click.ClickException(f"{len(bad)} section(s) did not run: {', '.join(r['name'] for r in bad)}")


for _param in reproduce_cmd.params:  # the shared --out/--force help, in this command's terms
    if _param.name == "out":
        _param.help = "Output folder (default report/): index.html, results.json, figures/ and cache/."
    elif _param.name == "force":
        _param.help = "Replace an existing report folder (only one stochformer created) instead of updating it."
