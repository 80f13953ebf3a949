"""Human-readable rendering of verdict documents (tables on stdout)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from release_ledger.ledger.vocabulary import (
    CAUSE_WORDS,
    Cluster,
    Hang,
    OutOfMemory,
    change_line,
    headline,
    one_line,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


def cell(value: object) -> Text:
    """A table cell that shows `value` as data: never rich markup, emoji codes or a line
    break it carries (each is shown escaped)."""
    from rich.text import Text

    return Text(one_line(str(value)))


def lines_cell(values: list[str], empty: str = "-") -> Text:
    """One escaped line per value in one cell."""
    from rich.text import Text

    return Text("\n".join(one_line(str(v)) for v in values) if values else empty)


STATUS_STYLE = {
    "passed": "bold green",
    "failed": "bold red",
    "unmeasured": "bold yellow",
    "awaiting": "bold yellow",
    "parked": "bold magenta",
}


def print_verdict(
    document: dict[str, Any], *, replayed: bool = False, console: Console | None = None
) -> None:
    # Imported here: rich costs start-up time that `--json` output never uses.
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    status = document["status"]
    title = f"run {document['run_id']}" + (" (replayed)" if replayed else "")
    table = Table(title=title, show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("verdict", f"[{STATUS_STYLE.get(status, 'bold')}]{status}[/]")
    table.add_row("rule", cell(f"{document['rule']} v{document['rule_version']}"))
    table.add_row("head", cell(f"{document.get('head_ref')} {str(document.get('head'))[:12]}"))
    table.add_row("base", cell(f"{document.get('base_ref')} {str(document.get('base'))[:12]}"))
    for line in interpreter_lines(document):
        label, _, summary = line.partition(": ")
        table.add_row(label, cell(summary))
    for label, line in cause_lines(document):
        table.add_row(label, cell(line))
    for key in ("introduced", "preexisting", "fixed", "flaky"):
        table.add_row(key, lines_cell(document.get(key) or []))
    for line in attribution_lines(document):
        table.add_row("introduced by", cell(line))
    for label, line in finding_lines(document):
        table.add_row(label, cell(line))
    for line in exoneration_lines(document):
        table.add_row("exonerated", cell(line))
    if document.get("retry_shards"):
        table.add_row("retry set", cell(", ".join(document["retry_shards"])))
    for entry in document.get("unmeasured") or []:
        culprits = ", ".join(entry["culprits"]) or "-"
        table.add_row(
            "unmeasured",
            cell(
                f"{entry['shard']}: {entry['reason']} (culprits: {culprits})"
                + (f" — {entry['detail']}" if entry.get("detail") else "")
            ),
        )
    for waiver in document.get("waivers") or []:
        table.add_row("waiver", cell(f"{', '.join(waiver['files'])} waived by {waiver['by']}"))
    for entry in document.get("environment_skips") or []:
        table.add_row("missing module", cell(entry["text"]))
    if document.get("baseline_reused"):
        reused = ", ".join(r[:12] for r in document["baseline_reused"])
        table.add_row("base reused from", cell(reused))
    if document.get("base_reuse"):
        table.add_row("base", cell(base_reuse_line(document["base_reuse"]).strip()))
    for reason in document.get("reasons") or []:
        table.add_row("why", cell(reason))
    console.print(table)
    click.echo(f"{document['run_id']} {status}")


def finish_verdict(document: dict[str, Any], as_json: bool, replayed: bool = False) -> None:
    """Print the verdict (JSON or a table) and exit with its status's code."""
    from release_ledger.cli.options import emit_json
    from release_ledger.ledger.replay import exit_code

    if as_json:
        emit_json(document)
    else:
        print_verdict(document, replayed=replayed)
    sys.exit(exit_code(str(document["status"])))


def base_reuse_line(reuse: dict[str, Any]) -> str:
    """How much of the base was measured afresh and how much reused, in one line."""
    fresh, reused = reuse["fresh"], reuse["reused"]
    line = (
        f"  base: {fresh['files']} files ({fresh['tests']} tests) run fresh, "
        f"{reused['files']} files ({reused['tests']} tests) reused"
    )
    if reuse.get("from"):
        line += " from " + ", ".join(r[:12] for r in reuse["from"])
    return line


def interpreter_lines(document: dict[str, Any]) -> list[str]:
    """One line per interpreter of a matrix verdict document (none without a matrix): its
    status and what decided it."""
    out = []
    for label, verdict in (document.get("interpreters") or {}).items():
        parts = [f"{len(verdict[k])} {k}" for k in ("introduced", "flaky") if verdict.get(k)]
        if verdict.get("unmeasured"):
            parts.append(f"{len(verdict['unmeasured'])} unmeasured")
        head = (verdict.get("tests") or {}).get("head")
        counted = [f"{head} tests at head"] if head is not None else []
        out.append(f"Python {label}: {verdict['status']} ({', '.join([*counted, *parts])})")
    return out


def cause_lines(document: dict[str, Any], limit: int = 5) -> list[tuple[str, str]]:
    """The introduced failures by cause, leading the verdict: the headline, then each cause
    with its count and first tests (`--json` lists every test of each)."""
    clusters = document.get("clusters") or []
    if not clusters:
        return []
    read = tuple(Cluster(c["signature"], tuple(c["tests"])) for c in clusters)
    out = [("causes", headline(read))]
    for one in clusters:
        tests = one["tests"]
        shown = ", ".join(tests[:limit]) + (
            f" and {len(tests) - limit} more" if len(tests) > limit else ""
        )
        out.append(("cause", f"{one['signature']} — {len(tests)}: {shown}"))
    return out


def finding_lines(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Lost coverage and resource regressions, each with its figures: test files removed at
    head, files heavier or slower at head than at base; how failures at both revisions were
    judged in the project's own order; and what of the harness head changed
    (`harness-changed`: it changes how the candidate is judged)."""
    out = [
        ("removed", f"{file} (removed at head)") for file in document.get("removed_at_head") or []
    ]
    for what in ("heavier", "slower"):
        out += [(what, change_line(change)) for change in document.get(what) or []]
    out += [("hung", Hang(**hang).line()) for hang in document.get("hung") or []]
    out += [("oom", OutOfMemory(**blown).line()) for blown in document.get("oom") or []]
    # Failures at both revisions in shards, judged again in the project's own order.
    out += [
        ("in order", f"{test}: {how} in the project's own order")
        for test, how in sorted((document.get("in_order") or {}).items())
    ]
    out += [("harness", line) for line in document.get("harness_changed") or []]
    out += [("not believed", f"{d['where']}: {d['why']}")
            for d in document.get("figures_not_believed") or []]  # fmt: skip
    return out
def exoneration_lines(document: dict[str, Any]) -> list[str]:
    """One line per exonerated failure: the test, the reason and the events that prove it
    (`run@position`), and whether this rule still counts it as introduced."""
    introduced = set(document.get("introduced") or ())
    lines = []
    for test, x in sorted((document.get("exonerated") or {}).items()):
        proof = ", ".join(f"{p['run_id'][:8]}@{p['position']}" for p in x.get("proof", [])[:4])
        still = f"; still introduced under {document.get('rule')}" if test in introduced else ""
        lines.append(f"{test}: {x['reason']} (proof {proof}{still})")
    return lines


def attribution_lines(document: dict[str, Any]) -> list[str]:
    """`ledger show`'s lines for the failures rerun with base's package set: which change
    introduced each (code, the dependency change, or unknown) and what moved."""
    attribution = document.get("attribution") or {}
    causes: dict[str, str] = attribution.get("causes") or {}
    if not causes:
        return []
    lines = [f"{test}: {CAUSE_WORDS.get(cause, cause)}" for test, cause in sorted(causes.items())]
    moved = attribution.get("moved") or []
    if moved:
        lines.append("moved: " + ", ".join(moved[:6]) + (" ..." if len(moved) > 6 else ""))
    reported = document.get("introduced_by_dependencies") or []
    if reported:
        rule = document.get("rule")
        lines.append(f"reported, not failed on by rule {rule}: " + ", ".join(reported))
    return lines
