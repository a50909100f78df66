"""The FinOps Foundation's `focus-validator`, run on our FOCUS exports by the test suite.

It needs Python >= 3.12 and pins that clash with the portal's (and its own pin numpy<2 clashes
with the pyarrow it needs, which wants numpy >= 2), so it lives in a virtual environment of its
own, built on first use under the user's cache folder and reused afterwards.

It reads the ISO 4217 currency codes from `focus_validator/rules/currency_codes.csv` relative to
the working directory (and would download them otherwise), so it runs in a scratch folder laid
out with the list shipped in `tests/billing/data/currency_codes.csv`.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

VALIDATOR = "focus-validator==2.2.1"
CURRENCY_CODES = Path(__file__).parent / "data" / "currency_codes.csv"
SUMMARY = re.compile(r"Total: (\d+) \| Pass: (\d+) \| Fail: (\d+) \| Skipped: (\d+)")
FAILED_RULE = re.compile(r"^❌ (\S+): FAIL", re.MULTILINE)


@dataclass
class ValidatorReport:
    total: int
    passed: int
    failed: int
    skipped: int
    failed_rules: list[str] = field(default_factory=list)
    output: str = ""

    def status_of(self, rule_id: str) -> str | None:
        match = re.search(rf"^\S+ {re.escape(rule_id)}: (PASS|FAIL|SKIPPED)", self.output, re.M)
        return match.group(1) if match else None


def python_312() -> str | None:
    """A working Python >= 3.12 on this machine: ours, one of pyenv's, or one on PATH (pyenv's
    shims are on PATH too but fail for versions not selected, so each is tried)."""
    if sys.version_info >= (3, 12):
        return sys.executable
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    installed = glob.glob(os.path.join(root, "versions", "3.1[2-9]*", "bin", "python3"))
    # The oldest that fits first: the validator's dependencies have wheels for it soonest.
    candidates = sorted(installed, key=_version_key)
    candidates += [shutil.which(name) for name in ("python3.12", "python3.13", "python3.14")]
    for candidate in filter(None, candidates):
        check = [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"]
        if subprocess.run(check, capture_output=True, timeout=60).returncode == 0:
            return candidate
    return None


def _version_key(path: str) -> tuple:
    version = Path(path).parents[1].name
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def validator_home() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    name = VALIDATOR.replace("==", "-")
    return Path(os.environ.get("FOCUS_VALIDATOR_HOME") or Path(cache) / "gpu-portal" / name)


def ensure_validator(python: str) -> Path:
    """The validator's executable, installing it into its own environment the first time."""
    home = validator_home()
    executable = home / "bin" / "focus-validator"
    marker = home / ".installed"
    if executable.exists() and marker.exists():
        return executable
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", str(home)], check=True, timeout=300)
    pip = [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, VALIDATOR, "pyarrow"], check=True, timeout=900)
    # After the validator: its metadata says numpy<2, but the pyarrow it imports needs numpy 2.
    subprocess.run([*pip, "numpy>=2"], check=True, timeout=600)
    marker.write_text(VALIDATOR + "\n")
    return executable


def run_validator(executable: Path, data_file: Path, version: str) -> ValidatorReport:
    """Validate `data_file` offline against FOCUS `version` (e.g. 1.2.0.1)."""
    with tempfile.TemporaryDirectory() as scratch:
        rules = Path(scratch) / "focus_validator" / "rules"
        rules.mkdir(parents=True)
        shutil.copy(CURRENCY_CODES, rules / "currency_codes.csv")
        result = subprocess.run(
            [
                str(executable),
                "--data-file", str(data_file),
                "--validate-version", version,
                "--block-download",
            ],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
    output = result.stdout + result.stderr
    summary = SUMMARY.search(output)
    if summary is None:
        raise AssertionError(
            f"focus-validator gave no summary (exit {result.returncode}):\n{output[-3000:]}"
        )
    total, passed, failed, skipped = map(int, summary.groups())
    return ValidatorReport(total, passed, failed, skipped, FAILED_RULE.findall(output), output)
