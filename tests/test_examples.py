"""The CI examples parse, and every `ledger` command and option they use exists."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["examples/github-actions.yml", "examples/gitlab-ci.yml"]


def _options(name: str) -> set[str]:
    from release_ledger.cli.main import cli

    assert isinstance(cli, click.Group)
    command = cli.get_command(click.Context(cli), name)
    assert command is not None, f"no command ledger {name}"
    return {opt for p in command.params for opt in getattr(p, "opts", [])}


@pytest.mark.parametrize("path", EXAMPLES)
def test_examples_parse_and_use_real_commands(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    assert isinstance(yaml.safe_load(text), dict)
    pattern = r"\bledger (gate|approve|report|show|expire|questions|verify-attestation|attest)\b"
    used = re.findall(pattern + r"([^\n;|>]*)", text)
    assert {name for name, _ in used} >= {
        "gate", "approve", "report", "expire", "attest", "verify-attestation"
    }
    for name, rest in used:
        for option in re.findall(r"(?<!\S)(--[a-z][a-z-]*)", rest):
            assert option in _options(name), f"ledger {name} has no {option} ({path})"


def test_github_workflow_gates_tags_and_keeps_reports() -> None:
    text = (ROOT / "examples/github-actions.yml").read_text(encoding="utf-8")
    workflow = yaml.safe_load(text)
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["push"]["tags"] == ["v*"] and "workflow_dispatch" in triggers
    assert '--out "$GITHUB_STEP_SUMMARY"' in text and "actions/upload-artifact" in text
    assert "--html out/release-gate.html" in text and "actions/cache" in text


@pytest.mark.parametrize("path", EXAMPLES)
def test_examples_sign_verify_and_keep_the_attestation(path: str) -> None:
    """The signing key comes from a secret into a 0600 file; the bundle is verified with the
    committed public key, kept in out/ (the artifact) and attached to the release."""
    text = (ROOT / path).read_text(encoding="utf-8")
    assert "--out out/verdict.intoto.jsonl" in text and "--pub .release-ledger.pub" in text
    assert "umask 077" in text or "install -m 600" in text
    assert "gh release upload" in text or "verdict.intoto.jsonl" in text.split("release:")[-1]


def test_gitlab_job_reports_junit() -> None:
    document = yaml.safe_load((ROOT / "examples/gitlab-ci.yml").read_text(encoding="utf-8"))
    assert document["release-gate"]["artifacts"]["reports"]["junit"] == "out/junit.xml"
