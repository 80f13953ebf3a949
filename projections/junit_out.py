"""The head's results as one JUnit XML file, for CI test-report views (`--junit-out`).

Pure: from the run's folded state and its verdict. Every test case of the latest measured
head attempt of each leaf shard, as its report stated it (failure, error, skipped, reruns of a
flaky pass); each file that stayed unmeasured becomes one error case named `(unmeasured)`, so
the report view never shows a pass that was not measured. The output is read back by the
gate's own strict reader (`domain.junit.read_report`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from release_ledger.domain.junit import TestCase
from release_ledger.domain.run_state import RunState
from release_ledger.domain.verdict import Verdict

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_RESULT_TAG = {"failed": "failure", "error": "error", "skipped": "skipped"}


def _clean(text: str | None) -> str:
    return _INVALID_XML.sub("\ufffd", text or "")


def _case(parent: ET.Element, case: TestCase) -> None:
    element = ET.SubElement(
        parent, "testcase", file=case.file, classname=case.classname, name=_clean(case.name)
    )
    if case.time is not None:
        element.set("time", f"{case.time:.3f}")
    tag = _RESULT_TAG.get(case.outcome)
    if tag is not None:
        result = ET.SubElement(element, tag)
        if case.message:
            result.set("message", _clean(case.message))
        if case.text:
            result.text = _clean(case.text)
    for rerun in case.reruns:
        again = ET.SubElement(element, rerun.kind)
        if rerun.message:
            again.set("message", _clean(rerun.message))
        if rerun.text:
            again.text = _clean(rerun.text)


def head_junit(state: RunState, verdict: Verdict) -> bytes:
    cases: list[TestCase] = []
    for shard in sorted(state.leaves(), key=lambda s: s.id):
        latest = shard.latest("head")
        if latest is not None and latest.assessment.measured and latest.assessment.report:
            cases.extend(latest.assessment.report.cases)
    unmeasured: dict[str, str] = {}
    for u in verdict.unmeasured:
        if u.revision in (None, "head"):
            for file in u.culprits or u.files:
                unmeasured.setdefault(file, f"{u.reason}: {u.detail}".rstrip(": "))
    measured_files = {c.file for c in cases}
    counts = {
        "tests": len(cases),
        "failures": sum(c.outcome == "failed" for c in cases),
        "errors": sum(c.outcome == "error" for c in cases),
        "skipped": sum(c.outcome == "skipped" for c in cases),
    }
    extra = sorted(f for f in unmeasured if f not in measured_files)
    counts["tests"] += len(extra)
    counts["errors"] += len(extra)
    root = ET.Element("testsuites", tests=str(counts["tests"]), failures=str(counts["failures"]),
                      errors=str(counts["errors"]))  # fmt: skip
    head = state.started.head_ref if state.started else "head"
    suite = ET.SubElement(root, "testsuite")
    suite.set("name", f"release-ledger {head} ({verdict.status})")
    for key, value in counts.items():
        suite.set(key, str(value))
    for case in cases:
        _case(suite, case)
    for file in extra:
        element = ET.SubElement(suite, "testcase", file=file,
                                classname=file.removesuffix(".py").replace("/", "."),
                                name="(unmeasured)")  # fmt: skip
        error = ET.SubElement(element, "error", message=_clean(unmeasured[file]))
        error.text = "the gate could not measure this file at head; see `ledger show`"
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body + b"\n"
