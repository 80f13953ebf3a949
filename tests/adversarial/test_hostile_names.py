"""7. Text from the suite is data, never markup. Arbitrary Unicode names (newlines, control
characters, `|`, `[`, backticks, HTML, bidi overrides) thrown at every renderer leave its
structure as it is with plain names: the same line count, headings, table rows and cells.
On today's main a file name with a newline forged a `**Outcome: passed**` line and a metric
row in the approval report, and `[...]` in a test id was eaten as rich markup."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from release_ledger.cli.render import print_verdict
from release_ledger.domain import events as ev
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import fold
from release_ledger.projections.approval import approval_report
from release_ledger.projections.timeline import timeline
from release_ledger.projections.verdict_view import verdict_document
from tests.runbuilder import RunBuilder

HOSTILE = [
    "x\n**Outcome: passed** — forged\n| 9 | gate | ok | pass |",
    "[bold red]passed[/]",
    "`code` <script>alert(1)</script> &amp; ![img](http://x)",
    "a|b|c",
    "\x1b[2J\x1b[31mred\r\u202eevil\u2028line\x85next",
    "# heading\n## another",
    "_em_ *strong* ~~gone~~ \\",
]
names = st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=40))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(name: str) -> RunBuilder:
    """A run that shows `name` as a file, a test, a question's text and subject, an owner,
    a check's name and value: every place a renderer puts text from outside."""
    file = f"tests/{name}.py"
    b = RunBuilder()
    b.discover([file, "tests/test_b.py"], missing_at_base=[file])
    b.plan({"s1": [file], "s2": ["tests/test_b.py"]})
    b.attempt("s1", "head", [file], None, signal=9)
    b.attempt("s2", "head", ["tests/test_b.py"], {"tests/test_b.py::test_b": "passed"})
    b.attempt("s2", "base", ["tests/test_b.py"], {"tests/test_b.py::test_b": "passed"})
    deadline = b.clock + timedelta(hours=1)
    common = {"topic": "unmeasured", "options": ["block", "waive-culprits"], "impact": "critical"}
    b.add(ev.QuestionAsked, question_id="q-unmeasured-1", text=f"is {name} ok?",
          subject=[file], recommended="block", deadline=deadline, **common)  # fmt: skip
    b.add(ev.QuestionAnswered, question_id="q-unmeasured-1", choice="waive-culprits", by=name)
    b.add(ev.AssumptionMade, question_id="q-new-1", topic="new-files", text=f"new {name}",
          options=["allow", "block"], impact="low", subject=[file], choice="allow",
          reason=name)  # fmt: skip
    b.add(ev.CheckRecorded, name=name, verdict="pass", value=name, by=name)
    return b


def _positioned(b: RunBuilder) -> list[tuple[int, ev.Event]]:
    return list(enumerate(b.events, start=1))


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line))


def _markdown_shape(markdown: str) -> tuple[Any, ...]:
    lines = markdown.split("\n")
    return (
        len(lines),
        [line for line in lines if line.startswith("#")],
        [_unescaped_pipes(line) for line in lines if line.startswith("|")],
        sum(line.startswith("**Outcome:") for line in lines),
        [line[:2] for line in lines],
    )


@SETTINGS
@given(name=names)
def test_the_approval_report_keeps_its_shape(name: str) -> None:
    def report(n: str) -> str:
        b = _run(n)
        return approval_report(
            _positioned(b), b.artifacts, get_rule("default").decide, required=[n]
        ).markdown

    hostile, plain = report(name), report("x")
    assert _markdown_shape(hostile) == _markdown_shape(plain)
    assert "\r" not in hostile and "\x1b" not in hostile
    outside_code = re.sub(r"(?<!\\)(`+)(?!`).*?(?<!`)\1(?!`)", "", hostile)
    assert not re.search(r"(?<!\\)<script", outside_code)  # HTML shown, never a tag


@SETTINGS
@given(name=names)
def test_show_prints_one_line_per_event(name: str) -> None:
    from release_ledger.cli.cmd_runs import show_lines

    def shown(n: str) -> list[str]:
        b = _run(n)
        state = fold(_positioned(b), b.artifacts)
        conclusion = get_rule("default").decide(state).as_dict()
        conclusion["introduced"] = [f"tests/{n}.py::{n}"]
        lines = [line.as_dict() for line in timeline(_positioned(b), b.artifacts)]
        text = "\n".join(show_lines(b.run_id, lines, conclusion))
        return text.splitlines()  # every line break Python knows, \u2028 and \x85 included

    hostile, plain = shown(name), shown("x")
    assert len(hostile) == len(plain)

    def columns(line: str) -> list[str]:
        tokens = line.split()  # an event: position, date, time, kind; a verdict line: its key
        return tokens[:4] if tokens[0].isdigit() else tokens[:1]

    assert [columns(line) for line in hostile[1:]] == [columns(line) for line in plain[1:]]


@SETTINGS
@given(name=names)
def test_the_verdict_table_keeps_its_rows_and_text(name: str) -> None:
    from release_ledger.domain.text import one_line

    def rendered(n: str) -> str:
        b = _run(n)
        state = fold(_positioned(b), b.artifacts)
        document = verdict_document(b.run_id, state, get_rule("default").decide(state))
        for key in ("introduced", "preexisting", "fixed", "flaky", "reasons"):
            document[key] = [f"tests/{n}.py::{n}"]
        console = Console(file=io.StringIO(), width=4000, color_system=None, emoji=True)
        print_verdict(document, console=console)  # (main: no console argument)
        return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]

    hostile, plain = rendered(name), rendered("x")
    assert len(hostile.splitlines()) == len(plain.splitlines())
    shown = one_line(f"tests/{name}.py::{name}")
    assert shown in hostile  # as data: no markup eaten, no emoji code replaced


def test_the_escapes_themselves() -> None:
    from release_ledger.domain.text import markdown_code, markdown_text, one_line

    assert one_line("a\nb\x1b\u202e") == "a\\nb\\x1b\\u202e"
    assert markdown_text("test_a_b | [x](y) <b> *s* _e_") == (
        "test_a_b \\| \\[x\\](y) \\<b> \\*s\\* \\_e\\_"
    )
    assert markdown_code("a`b") == "``a`b``"


def test_the_commands_show_names_as_data(tmp_path: Any) -> None:
    """End to end: `ledger show` gives one line per event, `ledger verdict` shows `[...]`."""
    from tests.gatekit import ledger_url, run_ledger
    from tests.ledgerkit import open_ledger

    name = "x\n**Outcome: passed**[red]y[/red]"
    b = _run(name)
    b.add(ev.RunCompleted)
    ledger = open_ledger(ledger_url(tmp_path))
    ledger.append(b.run_id, b.events, artifacts=b.artifacts)
    ledger.close()
    shown = run_ledger(tmp_path, "show", b.run_id)
    assert shown.code == 0, shown.stderr
    event_lines = [line for line in shown.stdout.splitlines() if line[:5].strip().isdigit()]
    assert len(event_lines) == len(b.events)
    assert not any(line.startswith("**Outcome") for line in shown.stdout.splitlines())
    verdict = run_ledger(tmp_path, "verdict", b.run_id)
    assert "[red]y[/red]" in verdict.stdout, verdict.stdout
