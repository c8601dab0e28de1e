"""A byte-level decoder-only transformer (pre-LN, rotary positions, tied embedding) with a slot KV cache.

``forward`` is the training path (causal attention over a window). ``step`` is the serving path: it
writes the new tokens' keys/values into per-sequence cache slots and attends over each slot's cached
positions, which is what continuous batching and prefix caching build on. Rotary positions make the
cached keys of a shared prefix valid for every request that starts with it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.model.errors import SpecError
from elastico_core.workloads.scale import Scale

VOCAB = 256  # bytes
WEIGHTS, META = "model.pt", "lm.json"


@dataclass(frozen=True, slots=True)
class LMConfig:
    d_model: int
    layers: int
    heads: int
    context: int  # training window (tokens); serving may go beyond it, up to max_model_len

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


LM_SCALES = {
    Scale.TINY: LMConfig(64, 2, 4, 128),
    Scale.SMALL: LMConfig(128, 4, 4, 256),
    Scale.FULL: LMConfig(256, 6, 8, 512),
}


def rope(x: Tensor, pos: Tensor) -> Tensor:
    """Rotate [B, H, T, D] by absolute positions ``pos`` [B, T] (rotary embedding, half-split form)."""
    half = x.shape[-1] // 2
    inv = 1.0 / (10000 ** (torch.arange(half, device=x.device, dtype=torch.float32) / half))
    ang = pos.to(torch.float32)[:, None, :, None] * inv  # [B, 1, T, half]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


@dataclass
class KVCache:
    """Keys and values per layer, ``[slots, heads, max_len, head_dim]``; a slot holds one sequence."""

    k: list[Tensor]
    v: list[Tensor]

    @classmethod
    def allocate(cls, cfg: LMConfig, slots: int, max_len: int) -> KVCache:
        shape = (slots, cfg.heads, max_len, cfg.head_dim)
        return cls([torch.zeros(shape) for _ in range(cfg.layers)], [torch.zeros(shape) for _ in range(cfg.layers)])

    @staticmethod
    def bytes_per_token(cfg: LMConfig) -> int:
        return 2 * cfg.layers * cfg.d_model * 4  # K and V, every layer, FP32

    @property
    def max_len(self) -> int:
        return int(self.k[0].shape[2])


class Block(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model)
        )

    def _qkv(self, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.cfg.heads, self.cfg.head_dim).permute(2, 0, 3, 1, 4)
        return rope(q, pos), rope(k, pos), v

    def _out(self, x: Tensor, att: Tensor) -> Tensor:
        b, _, t, _ = att.shape
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, self.cfg.d_model))
        return x + self.mlp(self.ln2(x))

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        q, k, v = self._qkv(x, pos)
        return self._out(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def step(self, x: Tensor, pos: Tensor, kc: Tensor, vc: Tensor, slots: Tensor) -> Tensor:
        q, k, v = self._qkv(x, pos)
        rows = slots[:, None].expand_as(pos)
        kc[rows, :, pos] = k.transpose(1, 2)  # [B, T, H, D] into each slot at its positions
        vc[rows, :, pos] = v.transpose(1, 2)
        length = int(pos.max()) + 1
        keys, values = kc[slots, :, :length], vc[slots, :, :length]
        allowed = torch.arange(length)[None, None, :] <= pos[:, :, None]  # [B, T, L]: causal within the slot
        att = F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed[:, None])
        return self._out(x, att)


class ByteLM(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.emb = nn.Embedding(VOCAB, cfg.d_model)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def forward(self, ids: Tensor) -> Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x, pos)
        return self.ln_f(x) @ self.emb.weight.t()

    @torch.no_grad()
    def step(self, ids: Tensor, pos: Tensor, cache: KVCache, slots: Tensor) -> Tensor:
        """Logits of the last new token of each row; ``ids``/``pos`` are [B, T], ``slots`` [B]."""
        x = self.emb(ids)
        blocks: list[Block] = list(self.blocks)  # type: ignore[arg-type]
        for block, kc, vc in zip(blocks, cache.k, cache.v, strict=True):
            x = block.step(x, pos, kc, vc, slots)
        return self.ln_f(x[:, -1]) @ self.emb.weight.t()

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def save_lm(model: ByteLM, folder: Path, meta: dict[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), folder / WEIGHTS)
    (folder / META).write_text(
        json.dumps({"config": asdict(model.cfg), **meta}, indent=2, sort_keys=True), encoding="utf-8"
    )


def load_lm(folder: Path) -> tuple[ByteLM, dict[str, object]]:
    """The model saved in ``folder``; a SpecError naming the folder if it is missing or damaged."""
    meta_path, weights = folder / META, folder / WEIGHTS
    if not meta_path.exists() or not weights.exists():
        raise SpecError(f"no byte-level LM here (want {META} and {WEIGHTS}; build one with "
                        "python -m elastico_core.workloads.build_lm)", where=f"model {str(folder)!r}")  # fmt: skip
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        model = ByteLM(LMConfig(**meta["config"]))
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    except Exception as exc:  # json, key, shape and unpickling errors all mean "damaged"
        raise SpecError(
            f"damaged model ({type(exc).__name__}: {str(exc)[:120]})", where=f"model {str(folder)!r}"
        ) from None
    model.eval()
    return model, meta
