"""Models from Hugging Face checkpoints, without a network: tiny random GPT-2, GPT-NeoX and Llama models built
from `transformers` configs, written with `save_pretrained`, loaded through mechmem by path
(`load_pretrained`, `--hf`), checked against the `transformers` model's own logits, and analysed by
detect_heads.py and report.py."""

import json

import pytest
import torch
from helpers import load_script
from hf_models import CTX, VOCAB, tiny_hf_model, tiny_tokenizer

from mechmem.analysis.heads import no_attention_reason
from mechmem.cli import run_script
from mechmem.models.backend import BACKEND, TL_VERSION
from mechmem.models.huggingface import load_pretrained

# TransformerLens 3.9 reads GPT2Config.n_ctx, which transformers 5 removed; its 4.x bridge reads GPT-2 fine.
_KNOWN = {("hooked", "gpt2"): f"TransformerLens {TL_VERSION} reads GPT2Config.n_ctx (gone in transformers 5)"}


@pytest.fixture(scope="module", params=["gpt2", "neox", "llama"])
def saved(request, tmp_path_factory):
    kind = request.param
    if (BACKEND, kind) in _KNOWN:
        pytest.xfail(_KNOWN[(BACKEND, kind)])
    model = tiny_hf_model(kind)
    # Not named after the model: TransformerLens 3.9 reads "llama" in a path as the original LLaMA's name.
    folder = tmp_path_factory.mktemp("hf")
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return kind, model, folder


def test_loaded_by_path_gives_the_transformers_logits(saved):
    kind, hf, folder = saved
    model = load_pretrained(str(folder))
    tokens = torch.randint(VOCAB, (3, CTX), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = hf(tokens).logits, model(tokens)
    gap = float((got - want).abs().max())
    print(f"{kind}: max |dlogit| {gap:.3g} against transformers")
    assert gap <= 1e-4
    assert no_attention_reason(model) is None


def test_detect_heads_and_report_run_on_it(saved, tmp_path):
    """detect_heads.py on every kind; the whole report on Llama alone (rotary positions, RMSNorm, a gated MLP,
    no biases: the kind furthest from the tasks' own models), about 20 s each on 2 cores."""
    kind, _, folder = saved
    scripts = [("detect_heads", ["--n-samples", "16"])]
    scripts += [("report", ["--n-samples", "32"])] if kind == "llama" else []
    for script, argv in scripts:
        out = tmp_path / script
        assert run_script(load_script(script).main, ["--hf", str(folder), "--out", str(out)] + argv) == 0
        assert any(out.iterdir())
    scores = json.loads((tmp_path / "detect_heads" / "detect_heads.json").read_text())
    assert scores["task"] == "repeats"


def test_hf_and_a_checkpoint_together_are_one_line_error(tmp_path, capsys):
    ckpt = tmp_path / "some.pt"
    ckpt.write_bytes(b"")  # exists, so the parser lets it through to the either-or check
    code = run_script(load_script("detect_heads").main, [str(ckpt), "--hf", str(tmp_path)])
    assert code == 2
    assert "not both or neither" in capsys.readouterr().err


def test_a_folder_that_is_not_a_model_is_one_line_error(tmp_path, capsys):
    assert run_script(load_script("detect_heads").main, ["--hf", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --hf") and "\n" not in err
