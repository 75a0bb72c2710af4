"""The `mechmem` command: its subcommands answer --help without torch, route to the same functions as the
scripts, and `mechmem analyse` writes what the single commands write, in one output set."""

import json
import subprocess
import sys

import pytest

from mechmem.cli.main import COMMANDS, main


def run_mechmem(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mechmem", *argv], cwd=cwd, capture_output=True, text=True, check=False
    )


@pytest.mark.subprocess
def test_help_lists_every_subcommand(tmp_path):
    done = run_mechmem("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in ("train", "ablate", "patch", "lens", "heads", "probe", "circuit", "qk", "report", "dynamics"):
        assert f"  {name} " in done.stdout
    for name in ("reproduce", "demo", "analyse"):
        assert f"  {name} " in done.stdout
    assert set(COMMANDS) >= {"reproduce", "demo", "analyse"}


@pytest.mark.subprocess
def test_every_subcommand_answers_help_before_torch():
    code = (
        "import sys, contextlib, io\n"
        "from mechmem.cli.main import COMMANDS, main\n"
        "for name in COMMANDS:\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        try:\n"
        "            main([name, '--help'])\n"
        "        except SystemExit as exc:\n"
        "            assert exc.code == 0, name\n"
        "    assert out.getvalue().startswith(f'usage: mechmem {name}'), (name, out.getvalue()[:80])\n"
        "heavy = [m for m in ('torch', 'transformer_lens', 'matplotlib') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print('ok', len(COMMANDS))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-2000:]


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nonsense"], "unknown command 'nonsense'"),
        (["heads", "--n-samples", "0"], "must be at least 1"),
        (["analyse", "/no/such/ckpt.pt"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_status_2(argv, message, tmp_path):
    done = run_mechmem(*argv, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.subprocess
def test_no_argument_prints_usage_with_status_2(tmp_path):
    done = run_mechmem(cwd=tmp_path)
    assert done.returncode == 2 and done.stdout.startswith("usage: mechmem")


@pytest.mark.subprocess
def test_importing_the_cli_changes_no_global_hook():
    code = "import sys; import mechmem.cli, mechmem.cli.main; print(sys.excepthook is sys.__excepthook__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"


@pytest.fixture(scope="module")
def planted_checkpoint(tmp_path_factory):
    import mechmem

    folder = tmp_path_factory.mktemp("planted")
    return mechmem.save_model(mechmem.planted_induction_model(), folder / "ckpt.pt")


def test_analyse_writes_what_each_command_writes(planted_checkpoint, tmp_path, capsys):
    """One process, one output set; each analysis's JSON equals its own command's for the same seed."""
    shared = ["--n-samples", "32", "--seed", "3"]
    assert main(["analyse", str(planted_checkpoint), "--out", str(tmp_path / "all"), *shared]) == 0
    summary = json.loads((tmp_path / "all" / "analyse.json").read_text())
    assert list(summary["analyses"]) == [
        "heads",
        "qk",
        "ablate",
        "patch",
        "lens",
        "probe",
        "circuit",
        "report",
    ]
    assert all("error" not in entry for entry in summary["analyses"].values())
    single = {"heads": "detect_heads.json", "probe": "memory_probes.json", "lens": "logit_lens.json"}
    for name, file_name in single.items():
        out = tmp_path / name
        assert main([name, str(planted_checkpoint), "--out", str(out), *shared]) == 0
        assert json.loads((tmp_path / "all" / name / file_name).read_text()) == json.loads(
            (out / file_name).read_text()
        ), name
    for entry in summary["analyses"].values():
        assert all((tmp_path / "all" / f).is_file() for f in entry["files"])
    assert (tmp_path / "all" / "report" / "figures").is_dir()
    assert "analysis" in capsys.readouterr().out


def test_analyse_refuses_an_unknown_analysis(planted_checkpoint, tmp_path):
    from mechmem.cli import UsageError

    with pytest.raises(UsageError, match="unknown analysis bogus"):
        main(["analyse", str(planted_checkpoint), "--only", "heads,bogus", "--out", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []
