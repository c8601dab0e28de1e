"""A tiny Llama model for vLLM on CPU: tests, CI, the demo and the local launcher, all offline.

``python -m elastico_core.workloads.tiny_model --out DIR`` (or ``make tiny-model``) trains a byte-level
BPE tokenizer on the bundled sonnets with ``tokenizers``, builds a ``LlamaForCausalLM`` (hidden 128, 2
layers, 4 heads of 32: a head size vLLM's CPU attention supports), trains it briefly on the same text so
its continuations are recognisable, and saves both with ``save_pretrained`` in float32. The build is
reproducible: the same arguments give the same files on one machine; ``elastico-model.json`` records the
recipe and each file's sha256, and is written last, so a folder without it is an interrupted build.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from elastico_core.workloads.corpus import corpus_sha256, lines
from elastico_core.workloads.entry import guarded

MANIFEST = "elastico-model.json"
DEFAULT_FOLDER = Path(".elastico") / "models" / "tiny-llama"


@dataclass(frozen=True, slots=True)
class TinyRecipe:
    """Everything the files depend on; the manifest stores it, and a different recipe rebuilds."""

    vocab_size: int = 1024  # BPE merges stop earlier on a small text: the real vocabulary is what it learns
    hidden_size: int = 128
    intermediate_size: int = 256
    layers: int = 2
    heads: int = 4
    head_dim: int = 32
    max_position_embeddings: int = 16384  # Table 2's longest max_model_len (RoPE: no parameters)
    steps: int = 200
    window: int = 64
    batch: int = 8
    lr: float = 3e-3
    seed: int = 0


@dataclass(frozen=True, slots=True)
class TinyModel:
    folder: Path
    params: int
    vocab: int
    loss: float  # cross-entropy (nats/token) of the last training step
    seconds: float
    built: bool  # False: an existing build of the same recipe was reused


def is_built(folder: Path, recipe: TinyRecipe | None = None) -> bool:
    """A complete build of ``recipe`` (default recipe when None) is in ``folder``."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(manifest.get("recipe") == asdict(recipe or TinyRecipe()))


def ensure_tiny_model(folder: Path = DEFAULT_FOLDER, recipe: TinyRecipe | None = None) -> Path:
    """The folder, built first if it does not hold this recipe yet (the tests and the demo call this)."""
    if not is_built(folder, recipe):
        print(f"building the tiny model into {folder} ...", file=sys.stderr)
        build_tiny_model(folder, recipe or TinyRecipe())
    return folder


def build_tiny_model(folder: Path, recipe: TinyRecipe) -> TinyModel:
    """Build into a sibling temp folder and rename, so readers never see half a model."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    t0 = time.perf_counter()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(lines(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        dtype="float32",
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same floating-point sums, hence the same weights, every build
    try:
        torch.manual_seed(recipe.seed)
        model = LlamaForCausalLM(config)
        loss = _train(model, tokenizer("\n".join(lines()) + "\n")["input_ids"], recipe)
    finally:
        torch.set_num_threads(threads)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tmp.iterdir())}
    manifest = {"recipe": asdict(recipe), "corpus_sha256": corpus_sha256(), "loss": round(loss, 4), "files": files,
                "corpus": "Shakespeare, sonnets 18, 116, 29, 73, 130 (public domain)"}  # fmt: skip
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(folder)
    params = sum(p.numel() for p in model.parameters())
    return TinyModel(folder, params, len(tokenizer), loss, time.perf_counter() - t0, True)


def _train(model: object, ids: list[int], recipe: TinyRecipe) -> float:
    """A few AdamW steps on random windows of the corpus (seeded), so greedy output echoes the verse."""
    import torch
    from torch.nn import functional as F

    net: torch.nn.Module = model  # type: ignore[assignment]
    data = torch.tensor(ids, dtype=torch.long)
    window = min(recipe.window, len(data) - 2)
    opt = torch.optim.AdamW(net.parameters(), lr=recipe.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(recipe.seed)
    loss = torch.tensor(float("nan"))
    net.train()
    for _ in range(recipe.steps):
        start = torch.randint(0, len(data) - window - 1, (recipe.batch,), generator=gen)
        chunk = data[start[:, None] + torch.arange(window + 1)]
        logits = net(input_ids=chunk[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    net.eval()
    return float(loss.detach())


@guarded
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m elastico_core.workloads.tiny_model", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_FOLDER), help=f"model folder (default: {DEFAULT_FOLDER})")
    p.add_argument("--steps", type=int, default=TinyRecipe().steps, help="training steps (0: random weights)")
    p.add_argument("--seed", type=int, default=TinyRecipe().seed)
    p.add_argument("--force", action="store_true", help="rebuild even if the folder holds this recipe")
    args = p.parse_args(argv)
    if args.steps < 0:
        p.error(f"--steps must be >= 0, got {args.steps}")
    recipe = TinyRecipe(steps=args.steps, seed=args.seed)
    folder = Path(args.out)
    if is_built(folder, recipe) and not args.force:
        print(f"{folder}: already built (recipe unchanged); --force rebuilds")
        return 0
    r = build_tiny_model(folder, recipe)
    print(f"built {r.folder}: {r.params:,} parameters, vocabulary {r.vocab}, loss {r.loss:.3f}, {r.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
