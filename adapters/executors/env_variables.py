"""What a shard and an environment build see of the gate's environment: allow-lists (the
suite is untrusted code: never the gate's tokens, passwords or ledger URL), the names the user
passes (`pass-env`), each file's time limits for the plugin, and the environment's own
variables applied. Stdlib-only, like `environment.py` (sent with it)."""

from __future__ import annotations

import json
import os
import re

# What a shard sees of the environment it is started in: the suite is untrusted code, so
# never the gate's whole environment (its ledger URL, database passwords, tokens), only these
# names (patterns end in `*`) and those the user names in `[tool.release-ledger] pass-env`.
# The locale, the terminal, the time zone and where certificates are: tox's defaults without
# its proxies and build flags.
SHARD_ENV_ALLOWED = (
    "PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "NO_COLOR",
    "FORCE_COLOR", "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "SOURCE_DATE_EPOCH",
)  # fmt: skip


# The gate's own settings never reach a suite, whatever `pass-env` says.
SHARD_ENV_NEVER = ("LEDGER_*",)


# What an environment build may see besides `SHARD_ENV_ALLOWED` and `pass-env`: where packages
# come from and how to reach them (uv's and pip's settings, proxies, its caches and config),
# and how native code is compiled. Its steps are the project's code, as its tests are: the
# gate's tokens, passwords and ledger URL never reach them.
BUILD_ENV_ALLOWED = (
    "UV_*", "PIP_*", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "HTTP_PROXY",
    "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "all_proxy", "USER", "LOGNAME", "CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS",
    "PKG_CONFIG_PATH", "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "MAKEFLAGS",
)  # fmt: skip
PASS_ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def build_env(env: dict[str, str], pass_env: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """The environment a build step runs with: of `env` only the allowed names and
    `pass_env`, never the gate's own settings."""
    return _allowed(env, (*SHARD_ENV_ALLOWED, *BUILD_ENV_ALLOWED, *pass_env))


def _allowed(env: dict[str, str], allowed: tuple[str, ...]) -> dict[str, str]:
    """Of `env`, the names `allowed` lists and never `SHARD_ENV_NEVER`."""
    return {
        k: v
        for k, v in env.items()
        if env_name_matches(k, allowed) and not env_name_matches(k, SHARD_ENV_NEVER)
    }


def env_name_matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether `name` is one of `patterns` (exact names, or prefixes ending in `*`)."""
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


# The gate's pytest plugin reads each file's time limit from this variable (its own copy of
# the name: the plugin is self-contained).
FILE_LIMITS_VARIABLE = "RELEASE_LEDGER_FILE_LIMITS"


def shard_env(
    env: dict[str, str],
    extra: dict[str, list[str]],
    *,
    pass_env: tuple[str, ...] | list[str] = (),
    home: str | None = None,
    tmp: str | None = None,
    file_limits: dict[str, float] | None = None,
) -> dict[str, str]:
    """The environment a shard's command runs with, built from an allow-list: of `env` only
    `SHARD_ENV_ALLOWED` and `pass_env`, never `SHARD_ENV_NEVER`; the prepared folders in
    front; `home` and `tmp` (the attempt's own, so nothing the suite leaves in its home or
    temporary folder reaches anything else) as HOME and TMPDIR; no bytecode written; the
    files' time limits for the gate's pytest plugin (`FILE_LIMITS_VARIABLE`)."""
    kept = _allowed(env, (*SHARD_ENV_ALLOWED, *pass_env))
    if not extra.get("VIRTUAL_ENV") and env.get("PYTHONPATH"):
        # `--env none`: the gate's interpreter and path are the suite's. With a venv the
        # revision is installed in it, and the gate's PYTHONPATH is never part of the
        # environment the project's CI would give its tests.
        kept["PYTHONPATH"] = env["PYTHONPATH"]
    if home:
        kept["HOME"] = home
    if tmp:
        kept["TMPDIR"] = tmp
    merged = apply_runtime(kept, extra)
    merged["PYTHONDONTWRITEBYTECODE"] = "1"
    if file_limits:
        merged[FILE_LIMITS_VARIABLE] = json.dumps(file_limits, sort_keys=True)
    return merged


def apply_runtime(env: dict[str, str], extra: dict[str, list[str]]) -> dict[str, str]:
    """`env` with the prepared environment's folders in front."""
    merged = dict(env)
    for name, folders in extra.items():
        if not folders:
            continue
        if name == "VIRTUAL_ENV":
            merged[name] = folders[0]
            continue
        if name == "SET":
            for item in folders:
                name_, _, value = item.partition("=")
                merged[name_] = value
            continue
        current = [p for p in merged.get(name, "").split(os.pathsep) if p]
        merged[name] = os.pathsep.join([*folders, *current])
    return merged
