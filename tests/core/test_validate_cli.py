"""`wfi validate`: exit codes 0/1/2/3, the --json array, claims files, no tracebacks."""

from __future__ import annotations

import json
import pathlib

import pytest

from wf_initiation.cli import main

MAIL = "name: triage\non:\n  mail.received: {inbox: a@b.co}\n"
BROKEN = "name: broken\non:\n  - mail.received: {inbox: a@b.co}\n"
ALL = "wf.scheduled-initiation,wf.external-event-initiation,wf.polling-initiation"


@pytest.fixture
def files(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    out = {}
    for name, text in {"mail": MAIL, "broken": BROKEN}.items():
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(text)
    return out


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict]]:
    code = main(["validate", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_a_valid_file_exits_0_and_prints_its_status(files, capsys) -> None:
    assert main(["validate", str(files["mail"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{files['mail']}: valid")


def test_an_invalid_file_exits_1_with_one_line_per_diagnostic(files, capsys) -> None:
    assert main(["validate", str(files["mail"]), str(files["broken"])]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{files['broken']}: invalid" in out
    assert any(line.strip().startswith(f"{files['broken']}:3: error TRIG-AS-REQUIRED") for line in out)


def test_json_output_is_an_array_with_one_object_per_file(files, capsys) -> None:
    code, objects = run_json(capsys, str(files["mail"]), str(files["broken"]))
    assert code == 1
    assert [o["status"] for o in objects] == ["valid", "invalid"]
    assert set(objects[0]) == {"file", "status", "workflow", "required_capabilities", "diagnostics"}
    assert objects[0]["required_capabilities"] == ["wf.external-event-initiation"]
    (diag,) = objects[1]["diagnostics"]
    assert diag == {
        "code": "TRIG-AS-REQUIRED",
        "message": diag["message"],
        "entry": "mail.received",
        "path": 'on[0]["mail.received"]',
        "line": 3,
        "capability": None,
    }


def test_an_unsupported_file_exits_3_naming_capability_and_entry(files, capsys) -> None:
    # proves: CAP-7, CAP-8
    code, (obj,) = run_json(capsys, "--claims", "wf.polling-initiation", str(files["mail"]))
    assert (code, obj["status"]) == (3, "unsupported")
    (diag,) = obj["diagnostics"]
    assert (diag["code"], diag["capability"], diag["entry"]) == (
        "CAP-UNSUPPORTED",
        "wf.external-event-initiation",
        "message",
    )


def test_invalid_wins_over_unsupported(files, capsys) -> None:
    assert main(["validate", "--claims", "wf.polling-initiation", str(files["mail"]), str(files["broken"])]) == 1


def test_claims_given_as_a_list_make_the_file_supported(files, capsys) -> None:
    # proves: CAP-7
    assert main(["validate", "--claims", ALL, str(files["mail"])]) == 0


def test_a_claims_file_from_the_conformance_runner_is_accepted(files, tmp_path, capsys) -> None:
    runner = tmp_path / "claims.json"
    runner.write_text(json.dumps({"deployment": "local", "capabilities": ["wf.external-event-initiation"]}))
    assert main(["validate", "--claims", str(runner), str(files["mail"])]) == 0
    lines = tmp_path / "claims.txt"
    lines.write_text("# claimed here\nwf.polling-initiation\n")
    assert main(["validate", "--claims", str(lines), str(files["mail"])]) == 3


def test_an_unreadable_claims_value_is_a_usage_error(files, tmp_path, capsys) -> None:
    bad = tmp_path / "claims.json"
    bad.write_text("{not json")
    for claims, why in ((bad, "not valid JSON"), (tmp_path / "absent.json", "absent.json")):
        with pytest.raises(SystemExit) as exited:  # argparse's usage error
            main(["validate", "--claims", str(claims), str(files["mail"])])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and "argument --claims" in err and why in err, err


def test_a_missing_workfile_is_invalid_not_a_traceback(tmp_path, capsys) -> None:
    code, (obj,) = run_json(capsys, str(tmp_path / "absent.yaml"))
    assert (code, obj["status"], obj["diagnostics"][0]["code"]) == (1, "invalid", "WF-FILE-UNREADABLE")


def test_with_a_deployment_whose_connection_chooses_imap_the_mail_entry_needs_polling(files, tmp_path, capsys) -> None:
    # proves: CAP-1, CAP-7
    def deployment(claims: str) -> str:
        path = tmp_path / f"deploy-{claims}.yaml"
        path.write_text(
            f"capabilities: [{claims}]\n"
            "connections:\n  inbox: {connector: mail, via: imap, host: imap.b.co, username: a@b.co, "
            "password: 'env:INBOX_PW'}\n"
            "workflows:\n  triage: {run: {workflow_type: Triage, task_queue: q}}\n")
        return str(path)

    code, (result,) = run_json(capsys, str(files["mail"]), "--deployment", deployment("wf.polling-initiation"))
    assert (code, result["status"], result["required_capabilities"]) == (0, "valid", ["wf.polling-initiation"])
    code, (result,) = run_json(capsys, str(files["mail"]), "--deployment", deployment("wf.external-event-initiation"))
    assert (code, result["status"]) == (3, "unsupported")
    assert result["diagnostics"][0]["capability"] == "wf.polling-initiation"
