"""`ledger report`: the run as one self-contained HTML page (and the head's JUnit file)."""

from __future__ import annotations

import hashlib

import click

from release_ledger.cli.options import common, emit_json
from release_ledger.ledger import outputs
from release_ledger.ledger import report as reports
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.vocabulary import BadInput


@click.command("report")
@click.argument("run")
@click.option("--html", "html_out", default=None, metavar="FILE",
              help="Write the HTML page to FILE (self-contained, no script).")  # fmt: skip
@click.option("--junit-out", "junit_out", default=None, metavar="FILE",
              help="Write the head's results as one JUnit XML file.")  # fmt: skip
@click.option("--rule", default=None, help="Judge under this rule (default: the run's own).")
@common
def report(
    run: str,
    html_out: str | None,
    junit_out: str | None,
    rule: str | None,
    ledger_url: str | None,
    as_json: bool,
) -> None:
    """Render a run for people and CI: one HTML file with the verdict banner, a timeline (one
    lane per executor slot or pool member, one bar per attempt coloured by outcome), the
    bisection tree of split shards, the test classification and the approval metrics.

    The page is a pure projection of the ledger: the same events give the same bytes.

    \b
    Examples:
      ledger report 3f2a --html report.html
      ledger report 3f2a --html out/gate.html --junit-out out/junit.xml --json
    """
    if not html_out and not junit_out:
        raise BadInput("name an output: --html FILE and/or --junit-out FILE")
    targets = {
        "html": reports.writable(html_out, "--html") if html_out else None,
        "junit": reports.writable(junit_out, "--junit-out") if junit_out else None,
    }
    written: dict[str, bytes] = {}
    with opened(ledger_url, create=False) as ledger:
        run_id = ledger.resolve(run)
        if targets["html"] is not None:
            written["html"] = reports.html_page(ledger, run_id, rule).encode("utf-8")
        if targets["junit"] is not None:
            written["junit"] = reports.junit_bytes(ledger, run_id, rule)
    files = {}
    for name, data in written.items():
        target = targets[name]
        assert target is not None
        outputs.write_whole(target, data, f"--{'html' if name == 'html' else 'junit-out'}")
        files[name] = {
            "path": str(target),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    if as_json:
        emit_json({"run_id": run_id, "files": files})
        return
    for name, info in files.items():
        click.echo(f"{name}: {info['path']} ({info['bytes']} bytes)")


COMMANDS = [report]
