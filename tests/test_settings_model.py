"""The gate's settings are declared once: the command line's flags, the repository table's keys
and the range checks are made from the declarations (the gate's and each executor's)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from release_ledger.adapters.executors import REGISTRY
from release_ledger.adapters.setting import Setting, unique
from release_ledger.cli.cmd_gate import gate
from release_ledger.domain.errors import BadInput
from release_ledger.ledger.options import EXECUTOR_SETTINGS, SETTINGS, GateOptions, validate
from release_ledger.ledger.settings import RepositorySettings, gate_options
from tests.gitrepo import make_repo, tag

ROOT = Path(__file__).resolve().parent.parent


def _flags() -> dict[str, str]:
    """`ledger gate`'s flags, each with the parameter it fills."""
    return {opt: param.name or "" for param in gate.params for opt in param.opts}


def test_every_declared_flag_is_a_flag_of_ledger_gate_filling_its_parameter() -> None:
    flags = _flags()
    for setting in (*SETTINGS, *EXECUTOR_SETTINGS):
        if setting.flag:
            assert flags.get(setting.flag) == setting.name, setting.flag


def test_every_executor_option_is_declared_as_a_setting() -> None:
    declared = {setting.target for setting in EXECUTOR_SETTINGS}
    for spec in REGISTRY.values():
        assert set(spec.options.model_fields) <= declared, spec.name


def test_every_declared_table_key_is_read_and_an_unknown_one_refused() -> None:
    keys = {f.alias or name for name, f in RepositorySettings.model_fields.items()}
    for setting in (*SETTINGS, *EXECUTOR_SETTINGS):
        if setting.table:
            assert setting.table in keys
    with pytest.raises(ValueError):
        RepositorySettings.model_validate({"budget-gb": 4.0})


def test_a_table_value_of_the_wrong_type_is_refused_not_coerced() -> None:
    with pytest.raises(ValueError):
        RepositorySettings.model_validate({"capacity": "4"})
    assert RepositorySettings.model_validate({"capacity": 4}).model_dump()["capacity"] == 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rounds": 101}, "--rounds must be at least 0 and at most 100, got 101"),
        ({"timeout_s": 0.0}, "--timeout must be more than 0"),
        ({"executor_options": {"capacity": 0}}, "--capacity must be at least 1"),
        ({"executor_options": {"port": 70000}}, "--ssh-port must be at least 1"),
    ],
)
def test_ranges_are_checked_from_the_declarations(changes: dict, message: str) -> None:
    options = GateOptions(repo=Path("."), base="v1", **changes)
    with pytest.raises(BadInput, match=message):
        validate(options)


def test_a_flag_of_another_executor_is_refused_naming_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    with pytest.raises(BadInput, match="--ssh-port does not apply to --executor local"):
        gate_options({"repo": str(repo), "base": "v1", "ssh_port": 22})


def test_executors_that_share_a_flag_share_one_declaration() -> None:
    first = Setting("image", "Image.", flag="--image", field="image")
    assert unique([first, Setting("image", "Other help.", flag="--image", field="image")]) == [
        first
    ]
    with pytest.raises(ValueError, match="declared twice"):
        unique([first, Setting("image", "Image.", flag="--image", field="picture")])


def test_a_new_executor_with_a_flag_is_one_module_and_one_registry_line(tmp_path: Path) -> None:
    """An executor declared in a module of its own and put in the registry gets its flag on
    `ledger gate`, its key in the table, its range check and its options filled, with
    nothing else changed."""
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    script = textwrap.dedent(
        f"""
        from release_ledger.adapters.executors import REGISTRY, local
        from release_ledger.adapters.executors.port import ExecutorOptions, ExecutorSpec, option

        class FarmOptions(ExecutorOptions):
            farm: str = option("The render farm.", required=True, metavar="NAME")
            slots: int | None = option("Slots per machine.", low=1, high=64)

        REGISTRY["farm"] = ExecutorSpec(name="farm", summary="a farm", options=FarmOptions,
                                        capabilities=local.SPEC.capabilities,
                                        build=local.SPEC.build)

        from click.testing import CliRunner
        from release_ledger.cli.cmd_gate import gate
        from release_ledger.domain.errors import BadInput
        from release_ledger.ledger.options import validate
        from release_ledger.ledger.settings import RepositorySettings, gate_options

        shown = CliRunner().invoke(gate, ["--help"]).output
        assert "--farm NAME" in shown and "--slots INTEGER" in shown, shown
        assert "Slots per machine." in shown
        table = RepositorySettings.model_validate({{"farm": "north", "slots": 8}}).model_dump()
        assert table["farm"] == "north" and table["slots"] == 8
        options = gate_options({{"repo": {str(repo)!r}, "base": "v1", "executor": "farm",
                                "farm": "north", "slots": 8}})
        assert options.executor_options == {{"farm": "north", "slots": 8}}, options
        try:
            validate(options.__class__(**{{**options.__dict__,
                                           "executor_options": {{"farm": "n", "slots": 65}}}}))
        except BadInput as error:
            assert "--slots must be at least 1 and at most 64" in str(error), error
        else:
            raise AssertionError("--slots 65 was accepted")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_configuration_page_lists_exactly_the_table_keys_the_reader_takes() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    listed = text.split("\nKeys: ", 1)[1].split(".\n", 1)[0]
    keys = {key.strip().strip("`") for key in listed.replace("\n", " ").split(",")}
    model = {f.alias or name for name, f in RepositorySettings.model_fields.items()}
    assert keys == model


def _started(options: dict[str, object]) -> object:
    from datetime import UTC, datetime

    from release_ledger.domain import events as ev

    return ev.RunStarted(
        run_id="r", at=datetime(2026, 1, 1, tzinfo=UTC), repo="/r", head_ref="HEAD",
        base_ref="v1", head="h", base="b", rule="default", executor="local",
        command=["{python}", "{junit}", "{files}"], options=options, tool_version="x",
        python_version="3.12.0",
    )  # fmt: skip


def test_every_recorded_setting_is_read_back_as_given_and_an_older_run_as_it_ran_then() -> None:
    import dataclasses

    from release_ledger.ledger.options import DEFAULTS, options_from

    recorded = [s for s in SETTINGS if s.recorded]
    assert {s.name for s in recorded} >= {"rounds", "env", "measure", "quarantine", "deadline"}
    given: dict[str, object] = {}
    for s in recorded:  # a value other than its default, of its default's type
        default = DEFAULTS.get(s.target, 1)
        if isinstance(default, bool):
            given[s.target] = not default
        elif isinstance(default, tuple):
            given[s.target] = ("x", "y")
        elif isinstance(default, int | float):
            given[s.target] = type(default)(default + 3)
        else:
            given[s.target] = "something-else"
    options = GateOptions(repo=Path("/r"), base="b", head="h", **given)  # type: ignore[arg-type]
    back = options_from(_started(options.recorded()))  # type: ignore[arg-type]
    for name, value in given.items():
        assert getattr(back, name) == value, name
    older = options_from(_started({}))  # type: ignore[arg-type]
    for s in recorded:
        expected = DEFAULTS.get(s.target) if s.before == "(the default)" else s.before
        if s.target != "jobs":
            assert getattr(older, s.target) == expected, s.name
    assert (older.measure, older.environment, older.release_builds) == ("solo", "none", False)
    assert dataclasses.asdict(older)["attribution"] is False


def test_each_setting_the_user_gives_is_declared_on_its_options_field_in_help_order() -> None:
    # One declaration: SETTINGS is read from GateOptions' fields, in field order (the order
    # `--help` lists them within a group), each aimed at its own field.
    import dataclasses

    from release_ledger.adapters.setting import declared_in

    assert declared_in(GateOptions) == SETTINGS
    fields = [f.name for f in dataclasses.fields(GateOptions) if "setting" in f.metadata]
    assert [s.target for s in SETTINGS] == fields
    worked_out = {"executor_options", "machine_mb", "head_settings_ignored", "base_settings_unread"}
    assert {f.name for f in dataclasses.fields(GateOptions)} - set(fields) == worked_out


def test_a_field_declared_as_a_setting_gives_its_name_type_default_and_target() -> None:
    import dataclasses

    from release_ledger.adapters.setting import declare, declared_in, setting

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Options:
        budget_gib: float = setting(
            8.0, "Memory [default: {default}].", flag="--budget-gib", table="budget-gib",
            low=0, high=10, group="Resources", recorded="budget_gib",
        )  # fmt: skip
        shards: int | None = setting(None, "Shards.", table="shards", group="Resources")
        environment: str = setting("auto", "Env.", name="env", table="env", group="Environments")
        repo: Path = dataclasses.field(metadata=declare("Repository.", flag="--repo"))

    budget, shards, env, repo = declared_in(Options)
    assert (budget.name, budget.target, budget.table_type) == ("budget_gib", "budget_gib", float)
    assert budget.help == "Memory [default: 8]." and budget.recorded == "budget_gib"
    assert shards.table_type is int  # `int | None` read as TOML's int
    assert (env.name, env.target, env.table_type) == ("env", "environment", str)
    assert (repo.name, repo.table_type) == ("repo", None)
    assert Options(repo=Path(".")).budget_gib == 8.0  # the field keeps its default


def test_a_table_key_on_a_field_of_no_toml_scalar_type_must_declare_its_table_type() -> None:
    import dataclasses

    from release_ledger.adapters.setting import declared_in, setting

    @dataclasses.dataclass(frozen=True)
    class Options:
        globs: tuple[str, ...] = setting((), "Globs.", table="globs")

    with pytest.raises(TypeError, match="globs: declare its table_type"):
        declared_in(Options)


def test_the_shard_count_is_read_back_as_given_or_as_the_default_fitted_to_the_suite() -> None:
    from release_ledger.ledger.options import options_from

    given = GateOptions(repo=Path("/r"), base="b", head="h", jobs=3, shards=4)
    fitted = GateOptions(repo=Path("/r"), base="b", head="h", jobs=3)
    assert options_from(_started(given.recorded())).shards == 4  # type: ignore[arg-type]
    back = options_from(_started(fitted.recorded()))  # type: ignore[arg-type]
    assert (back.shards, back.shard_count) == (None, 6)  # a resumed run fits it again
    older = options_from(_started({"shards": 6}))  # type: ignore[arg-type]
    assert older.shards == 6  # a run recorded before fitting: the count it ran with
