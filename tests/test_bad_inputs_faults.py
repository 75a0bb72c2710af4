"""Bad inputs and faults, third round: one test per class of failure `benchmarks/attacks.py` found, each run
against the mechanism that fixed it (a config that names an unknown activation, a Hugging Face folder that is
hostile or only misnamed, a stop signal from a closed terminal, an output folder that changes under a run).

Runs under both TransformerLens backends (`make test-tl3` includes it).
"""

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import ROOT, wait_for
from script_cases import load_main, run_case

from mechmem.analysis.planted import planted_induction_model
from mechmem.checkpoint import save_model
from mechmem.cli import run_script
from mechmem.errors import CheckpointError, MechmemError
from mechmem.io import OutputSet, atomic_write, output_dir
from mechmem.models.huggingface import load_pretrained
from mechmem.models.transformer_config import TransformerConfig

pytestmark = pytest.mark.usefixtures("as_a_user_runs")  # see conftest.py

TRAIN = ["permutation", "--preset", "task1-quick", "--steps", "4", "--save-every", "2", "--no-progress"]


def env_with_src() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }


# -- a config names an activation that does not exist --------------------------------------------------------
def test_an_unknown_activation_is_refused_with_or_without_an_mlp(tmp_path):
    for d_mlp in (None, 16):
        with pytest.raises(ValueError, match="act_fn 'evil' is neither"):
            TransformerConfig(
                n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4, d_mlp=d_mlp, act_fn="evil"
            )
    good = save_model(planted_induction_model(), tmp_path / "good.pt")  # attention only
    payload = torch.load(good, weights_only=True)
    payload["model_config"]["act_fn"] = "evil"
    from mechmem.checkpoint import load_checkpoint, payload_digest

    payload["digest"] = payload_digest(payload)
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="act_fn 'evil'") as info:
        load_checkpoint(tmp_path / "bad.pt")
    assert "\n" not in str(info.value)


@pytest.mark.subprocess
def test_an_activation_a_paper_registers_is_known_before_any_paper_is_imported():
    """The birth paper registers "linear" when its plugin is imported; a config naming it in a fresh process
    (no paper imported yet) loads the plugins to find it, and a name no plugin registers is still refused."""
    code = textwrap.dedent(
        """
        import sys
        from mechmem.models.transformer_config import TransformerConfig
        assert not any(name.startswith("mechmem_papers.birth") for name in sys.modules)
        TransformerConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4, d_mlp=8, act_fn="linear")
        try:
            TransformerConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4, act_fn="nonlinear")
        except ValueError:
            print("refused")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env_with_src(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr[-2000:]


# -- models from Hugging Face: a misnamed folder, a hostile folder -------------------------------------------
def tiny_llama(folder):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # transformers initialises from the global RNG; tests only
    config = LlamaConfig(
        vocab_size=40, max_position_embeddings=24, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    return model


def test_a_folder_whose_name_says_llama_loads_with_the_transformers_logits(tmp_path):
    """TransformerLens 3.9 takes a path naming "llama" for the original LLaMA and reads no config;
    `load_pretrained` hands it the config under a neutral name, so the folder's name does not matter under
    either backend."""
    folder = tmp_path / "my-tiny-llama-gemma"
    hf = tiny_llama(folder)
    model = load_pretrained(str(folder))
    tokens = torch.randint(40, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        gap = float((model(tokens) - hf(tokens).logits).abs().max())
    assert gap <= 1e-4, gap


def _pickle_only(hf, victim):
    (hf / "model.safetensors").unlink()
    statement = f"open({str(victim)!r}, 'w').write('unpickled')"
    (hf / "pytorch_model.bin").write_bytes(b"cbuiltins\nexec\n(S" + repr(statement).encode() + b"\ntR.")


def _set_config(**changes):
    def edit(hf, victim):
        config = json.loads((hf / "config.json").read_text())
        config.update(changes)
        (hf / "config.json").write_text(json.dumps(config))

    return edit


def _weights(fn):
    def edit(hf, victim):
        from safetensors.torch import load_file, save_file

        save_file(
            fn(load_file(hf / "model.safetensors")), hf / "model.safetensors", metadata={"format": "pt"}
        )

    return edit


HOSTILE = {
    "a FIFO": (lambda hf, victim: os.mkfifo(hf / "generation_config.json.new"), "not a plain file"),
    "pickled weights only": (_pickle_only, "pickles"),
    "cut safetensors": (
        lambda hf, victim: (hf / "model.safetensors").write_bytes(
            (hf / "model.safetensors").read_bytes()[:-100]
        ),
        "runs past the end",
    ),
    "integer weights": (
        _weights(lambda s: {k: v.to(torch.int32) for k, v in s.items()}),
        "not floating point",
    ),
    "a size beyond the weights": (_set_config(vocab_size=10**9), "declares vocab_size"),
    "a weight missing": (
        _weights(lambda s: {k: v for k, v in s.items() if "layers.1.mlp.up" not in k}),
        "missing",
    ),
    "an extra weight": (_weights(lambda s: {**s, "model.layers.7.extra": torch.zeros(2)}), "unexpected"),
    "a config nested 200 deep": (
        lambda hf, victim: (hf / "config.json").write_text('{"a": ' + "[" * 200 + "]" * 200 + "}"),
        "nests deeper",
    ),
}
"""One hostile folder per class `check_hf_folder` and the weight match refuse: (edit, words of the error)."""


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf") / "tiny"
    tiny_llama(folder)
    return folder


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_hugging_face_folder_is_one_line_and_never_unpickled(case, llama_folder, tmp_path, capsys):
    hf = tmp_path / "tiny"
    hf.mkdir()
    for path in llama_folder.iterdir():
        (hf / path.name).write_bytes(path.read_bytes())
    victim = tmp_path / "outside" / "pwned"
    victim.parent.mkdir()
    edit, words = HOSTILE[case]
    edit(hf, victim)
    out = tmp_path / "out"
    status, err, _, _ = run_case(
        "detect_heads", ["--hf", str(hf), "--out", str(out), "--n-samples", "4"], capsys, out
    )
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and words in lines[0], err
    assert not victim.exists() and not out.exists()


def test_a_safetensors_header_is_checked_against_the_file_size(tmp_path, llama_folder):
    from mechmem.models.hf_folder import check_hf_folder

    check_hf_folder(llama_folder, "ok")  # the untouched folder passes
    hf = tmp_path / "tiny"
    hf.mkdir()
    (hf / "config.json").write_bytes((llama_folder / "config.json").read_bytes())
    (hf / "model.safetensors").write_bytes(struct.pack("<Q", 2**40) + b"{}")
    with pytest.raises(MechmemError, match="header is cut"):
        check_hf_folder(hf, "x")


# -- a closed terminal: SIGHUP -------------------------------------------------------------------------------
@pytest.mark.subprocess
def test_sighup_stops_a_run_as_an_interrupt_and_leaves_nothing_half_written(tmp_path):
    out = tmp_path / "R"
    argv = [
        "permutation",
        "--preset",
        "task1-quick",
        "--steps",
        "1000000",
        "--save-every",
        "2",
        "--no-progress",
    ]
    # The child starts as from a terminal, SIGHUP at its default, even when these tests run under nohup (whose
    # ignored SIGHUP a child inherits and, by design, keeps).
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "analyses" / "train.py"), *argv, "--out", str(out)],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env_with_src(),
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGHUP, previous)
    wait_for(lambda: any(out.glob("checkpoints/step_*.pt")), proc, timeout_s=600)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "error: interrupted", err
    left = [p.name for p in out.rglob("*") if ".tmp" in p.name or p.name == ".lock"]
    assert not left, left


def test_an_ignored_sighup_stays_ignored(monkeypatch):
    """Under `nohup` the parent ignores SIGHUP; the script must not take the terminal's hang-up back."""
    from mechmem.io import catch_stop_signals

    previous = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        catch_stop_signals()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        catch_stop_signals()
        assert callable(signal.getsignal(signal.SIGHUP))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- an output folder that changes under its writer ----------------------------------------------------------
@pytest.mark.parametrize("change", ["renamed", "removed", "replaced by a link", "a subfolder linked"])
def test_a_held_folder_that_changes_is_never_recreated_or_written_through(change, tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    with pytest.raises(MechmemError, match="moved, removed or replaced|symbolic link"), output_dir(out):
        atomic_write(out / "sub" / "a.json", "{}")
        if change == "renamed":
            out.rename(tmp_path / "moved")
        elif change == "removed":
            (out / "sub" / "a.json").unlink()
            (out / "sub").rmdir()
            (out / ".lock").unlink()
            out.rmdir()
        elif change == "replaced by a link":
            out.rename(tmp_path / "moved")
            out.symlink_to(outside, target_is_directory=True)
        else:
            (out / "sub").rename(tmp_path / "old-sub")
            (out / "sub").symlink_to(outside, target_is_directory=True)
        atomic_write(out / "sub" / "b.json", "{}")
    assert not any(outside.iterdir())
    assert change == "a subfolder linked" or not out.exists() or out.is_symlink()
    with pytest.raises(MechmemError), output_dir(tmp_path / "o2"), OutputSet(tmp_path / "o2") as files:
        files.add("x.json", "{}")
        (tmp_path / "o2").rename(tmp_path / "o2-moved")
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o2-moved" / "x.json").exists()


def test_a_training_run_whose_folder_is_moved_stops_in_one_line_and_resumes_where_it_went(
    tmp_path, capsys, monkeypatch
):
    from mechmem.training import trainer

    out, moved = tmp_path / "R", tmp_path / "R-moved"
    real = trainer.save_checkpoint
    calls = []

    def move_then_save(path, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            out.rename(moved)
        return real(path, **kwargs)

    monkeypatch.setattr(trainer, "save_checkpoint", move_then_save)
    status, err, _, _ = run_case("train", [*TRAIN, "--out", str(out)], capsys, out)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "moved, removed or replaced" in lines[0], err
    assert not out.exists() and (moved / "checkpoints" / "step_0000002.pt").exists()
    monkeypatch.setattr(trainer, "save_checkpoint", real)
    assert run_script(load_main("train"), [*TRAIN, "--out", str(moved), "--resume"]) == 0
    assert (moved / "ckpt.pt").exists() and not (moved / ".lock").exists()


# -- an odd environment: a backend matplotlib does not know --------------------------------------------------
@pytest.mark.subprocess
def test_a_program_draws_with_agg_whatever_mplbackend_says(monkeypatch, tmp_path):
    """MPLBACKEND naming no backend stopped a script at its first figure with matplotlib's traceback; a
    program writes files only, so it always takes Agg (in a fresh interpreter: the backend is read once)."""
    from mechmem.cli.runner import use_file_backend_when_loaded

    monkeypatch.setenv("MPLBACKEND", "no-such-backend")
    use_file_backend_when_loaded()
    assert os.environ["MPLBACKEND"] == "Agg"
    code = f"import matplotlib.pyplot as plt; fig = plt.figure(); fig.savefig({str(tmp_path / 'f.png')!r})"
    done = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ), capture_output=True, check=False
    )
    assert done.returncode == 0 and (tmp_path / "f.png").stat().st_size > 0, done.stderr[-500:]


@pytest.mark.subprocess
def test_a_save_whose_zip_writer_an_interrupt_left_unfinished_does_not_abort_the_process(tmp_path):
    """An interrupt landing as torch.save's writer context exits skips the archive's end; the writer then
    finishes it from its destructor, after the staged file was closed: the process must end normally (a
    write to the closed file aborted it, SIGABRT, with the interrupt's line already printed)."""
    import torch.serialization

    if not hasattr(torch.serialization, "_open_zipfile_writer_buffer"):
        pytest.skip("this torch writes archives another way")
    code = textwrap.dedent(f"""
        import gc, torch, torch.serialization
        from mechmem.checkpoint import atomic_torch_save
        def cut(self, *exc):
            raise KeyboardInterrupt
        torch.serialization._open_zipfile_writer_buffer.__exit__ = cut
        try:
            atomic_torch_save({{"w": torch.ones(3)}}, {str(tmp_path / "x.pt")!r})
        except KeyboardInterrupt:
            print("interrupted")
        gc.collect()
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env_with_src(), capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "interrupted\n"), done.stderr[-500:]
    assert list(tmp_path.iterdir()) == []


def test_a_stop_signal_as_the_staged_file_is_made_leaves_no_staged_file(tmp_path, monkeypatch):
    """A stop signal landing between the staged file's creation and the clean-up that knows its name (inside
    mkstemp, mkdtemp) is held back until it does: the write is interrupted and nothing staged is left."""
    import tempfile

    def then_stopped(make):
        def made(*args, **kwargs):
            name = make(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode, before `name` is returned
            return name

        return made

    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        monkeypatch.setattr(tempfile, "mkstemp", then_stopped(tempfile.mkstemp))
        with pytest.raises(KeyboardInterrupt):
            atomic_write(tmp_path / "a.txt", "a")
        monkeypatch.setattr(tempfile, "mkdtemp", then_stopped(tempfile.mkdtemp))
        with pytest.raises(KeyboardInterrupt), OutputSet(tmp_path) as files:
            files.add_dir("figures", {"f.txt": b"f"})
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_masked_by_the_writers_clean_up_is_still_an_interrupt(tmp_path):
    """torch.save's zip writer, cut by an interrupt, fails again while closing (RuntimeError "unexpected
    pos"), which would turn a stop into a traceback: the write raises the interrupt, leaves no temporary file
    and keeps the old content."""
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"old")

    def writer(fh):
        try:
            fh.write(b"partial")
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("unexpected pos 44608 vs 44520")  # as the zip writer's close does

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, writer=writer)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]
    with pytest.raises(RuntimeError, match="unexpected pos"):  # a failure with no interrupt behind it stays
        atomic_write(path, writer=lambda fh: (_ for _ in ()).throw(RuntimeError("unexpected pos")))
