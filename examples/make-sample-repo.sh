#!/usr/bin/env bash
# Create a small git repository to try the gate on: release v1.0.0, then a candidate that
# keeps one preexisting failure, fixes one test and adds a test file (the gate passes:
# exit 0). With --regression the candidate also breaks one test (the gate fails: exit 1).
# The candidate is version 1.1.0 with a CHANGES.md naming it and a README that renders, so
# `ledger approve` approves it (its sdist and wheel build, and the upgrade from 1.0.0 works).
#   examples/make-sample-repo.sh /tmp/sample && ledger gate --repo /tmp/sample --base v1.0.0
set -euo pipefail
dir=${1:?usage: make-sample-repo.sh DIR [--regression]}
regression=${2:-}
rm -rf "$dir"; mkdir -p "$dir/tests"; cd "$dir"
git init -q -b main .
git config user.email sample@example.invalid; git config user.name "Sample Owner"
git config commit.gpgsign false
cat > calc.py <<'PY'
def add(a, b):
    return a + b


def div(a, b):
    return a / b
PY
for i in 1 2 3 4 5 6; do
  cat > "tests/test_module_$i.py" <<PY
import calc


def test_add_$i():
    assert calc.add($i, 1) == $i + 1


def test_div_$i():
    assert calc.div($i, 1) == $i
PY
done
cat > tests/test_known_bug.py <<'PY'
def test_known_bug():
    assert "known" == "fixed"  # fails at v1.0.0 and at the candidate
PY
cat > tests/test_fixed_later.py <<'PY'
def test_rounding():
    assert round(2.675, 2) == 2.675  # fails at v1.0.0, fixed by the candidate
PY
cat > pyproject.toml <<'TOML'
[project]
name = "sample-calc"
version = "1.0.0"
readme = "README.md"
requires-python = ">=3.11"
TOML
printf '# sample-calc\n\nAdds and divides, for trying `ledger gate`.\n' > README.md
printf '# Changes\n\n## 1.0.0\n\n- first release\n' > CHANGES.md
git add -A; git commit -qm "release 1.0.0"; git tag v1.0.0
if [ "$regression" = "--regression" ]; then
  cat > calc.py <<'PY'
def add(a, b):
    return a + b + (1 if a == 3 else 0)  # the regression


def div(a, b):
    return a / b
PY
fi
cat > tests/test_fixed_later.py <<'PY'
def test_rounding():
    assert round(2.675, 2) == 2.67
PY
cat > tests/test_new_feature.py <<'PY'
import calc


def test_new_feature():
    assert calc.add(0, 0) == 0
PY
sed -i 's/^version = "1.0.0"/version = "1.1.0"/' pyproject.toml
printf '# Changes\n\n## 1.1.0\n\n- rounding fixed, new feature\n\n## 1.0.0\n\n- first release\n' > CHANGES.md
git add -A; git commit -qm "candidate 1.1.0"
echo "sample repository ready in $dir (base v1.0.0, head main)"
