"""How a setting of the gate is given, declared once: its command-line flag, its key in the
repository's `[tool.release-ledger]` table (and the revision that table is read at), its help,
the group `ledger gate --help` lists it under, and its bounds.

The gate's own settings are declared on the fields of `ledger/options.GateOptions` itself
(`setting(...)`, `declare(...)`; `declared_in` lists them in field order), each executor's on
its options model (`adapters/executors/port.py`); the command line's flags, the table's
reader, what `RunStarted` records and the range checks are all made from them, so a new
setting is one declaration.
It is how a value is *given* (flags, help, table keys), not what it means: it lives beside
the adapters that read those inputs, and the domain keeps only the values and their rules.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from typing import (
    Any,
    Literal,
    TypedDict,
    TypeVar,
    Union,
    Unpack,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

Kind = Literal["text", "int", "float", "path", "choice", "flag", "switch"]

SAME = "(the default)"  # `Setting.before`: runs recorded before it read as its default

# The groups `ledger gate --help` shows its options in, in this order (an executor's own
# settings are all under "Executor"; "Output" also holds the command line's own --json).
HelpGroup = Literal["What to test", "Environments", "Resources", "Executor", "Policy", "Output"]
HELP_GROUPS: tuple[HelpGroup, ...] = get_args(HelpGroup)


@dataclass(frozen=True)
class Setting:
    """One setting. `name` is its parameter (`budget_gib`); `field` where its value lands
    (an attribute of the gate's options, or a key of an executor's options)."""

    name: str
    help: str
    kind: Kind = "text"
    flag: str | None = None  # "--budget-gib"; None: only in the table
    table: str | None = None  # "budget-gib"; None: only on the command line
    table_type: Any = None  # the TOML value's type (a TOML value is typed already: strict)
    field: str = ""  # default: the name
    metavar: str | None = None
    multiple: bool = False  # the flag repeats (`--discover A --discover B`)
    choices: tuple[str, ...] = ()
    flag_default: Any = None  # only where the command line itself needs one (`--repo .`)
    # A number's range: (low, high), low excluded when `low_open` (for `--timeout 0`).
    low: float | None = None
    high: float | None = None
    low_open: bool = True
    # Where the table's value is read: at head for what describes the code being tested (how
    # its environment is installed, its interpreters), else at base: the gate's policy comes
    # from the release already approved, so a candidate cannot loosen the gate judging it.
    at_head: bool = False
    # Where `ledger gate --help` lists its flag (None only for a setting with no flag).
    group: HelpGroup | None = None
    # Its key in what `RunStarted` records of the options (None: recorded otherwise, or not
    # at all), and the value a run recorded before the setting existed reads as (`SAME`: its
    # default), so a resumed old run does what it did then.
    recorded: str | None = None
    before: Any = SAME

    @property
    def target(self) -> str:
        return self.field or self.name

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def out_of_range(self, value: Any) -> str | None:
        """Why `value` is not allowed (one line naming the flag), or None."""
        if not self.bounded or value is None:
            return None
        assert self.low is not None and self.high is not None
        label = self.flag or self.table or self.name
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            return f"{label} must be a finite number, got {value}"
        if value in (float("inf"), float("-inf")):
            return f"{label} must be a finite number, got {value}"
        too_low = value <= self.low if self.low_open else value < self.low
        if too_low or value > self.high:
            bound = "more than" if self.low_open else "at least"
            return f"{label} must be {bound} {self.low:g} and at most {self.high:g}, got {value:g}"
        return None


def unique(settings: list[Setting]) -> list[Setting]:
    """The settings with each flag once: executors that share a flag share its declaration
    (the first one's help); two declarations of one flag that disagree on where the value
    lands are a programming error."""
    seen: dict[str, Setting] = {}
    for setting in settings:
        key = setting.flag or f"table:{setting.table}"
        known = seen.get(key)
        if known is None:
            seen[key] = setting
        elif (known.name, known.target, known.kind) != (setting.name, setting.target, setting.kind):
            raise ValueError(f"{key} is declared twice, differently")
    return list(seen.values())


class How(TypedDict, total=False):
    """How a field of the gate's options is given: `Setting`'s fields but its name and help.
    `table_type` may be left out where the field's own type is a TOML scalar's (`float`,
    `int | None`)."""

    kind: Kind
    flag: str
    table: str
    table_type: Any
    metavar: str
    multiple: bool
    choices: tuple[str, ...]
    flag_default: Any
    low: float
    high: float
    low_open: bool
    at_head: bool
    group: HelpGroup
    recorded: str
    before: Any


T = TypeVar("T")


def declare(help: str, *, name: str = "", **how: Unpack[How]) -> dict[str, Setting]:
    """A field's metadata declaring it a setting (for `dataclasses.field(metadata=...)`, where
    the field has no plain default: a required one, a factory's). `name` is its parameter and
    table model's name where it is not the field's (`env` for `environment`)."""
    return {"setting": Setting(name, help, **how)}


def setting(default: T, help: str, /, *, name: str = "", **how: Unpack[How]) -> T:
    """A field of the gate's options that is a setting, with its default; `{default}` in the
    help reads as the default (`8`, `default`). Typed as its default, as `dataclasses.field`
    is, so the field keeps its own type."""
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    metadata = declare(help.replace("{default}", shown), name=name, **how)
    return cast(T, dataclasses.field(default=default, metadata=metadata))


def declared_in(model: type) -> tuple[Setting, ...]:
    """The settings declared on a dataclass's fields, in field order (the order `--help`
    lists them within their groups), each named and aimed at its field."""
    hints = get_type_hints(model)
    found = []
    for field in dataclasses.fields(model):
        declared = field.metadata.get("setting")
        if declared is None:
            continue
        name = declared.name or field.name
        table_type = declared.table_type
        if declared.table and table_type is None:
            table_type = _toml_type(hints[field.name], field.name)
        found.append(dataclasses.replace(
            declared, name=name, field="" if name == field.name else field.name,
            table_type=table_type,
        ))  # fmt: skip
    return tuple(found)


def _toml_type(hint: Any, name: str) -> type:
    """A TOML scalar's type for a field's (`int | None` -> int); declare any other."""
    if get_origin(hint) in (Union, types.UnionType):
        given = [arg for arg in get_args(hint) if arg is not type(None)]
        hint = given[0] if len(given) == 1 else hint
    if hint in (bool, int, float, str):
        return cast(type, hint)
    raise TypeError(f"setting {name}: declare its table_type (its type is {hint})")
