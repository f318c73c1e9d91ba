"""A decoder-only GPT with GPT-2's architecture (chapter 08).

Token and learned position embeddings → ``n_layers`` pre-norm causal blocks → final LayerNorm → unembedding tied to
the token embedding. :meth:`GPT.from_gpt2_state_dict` loads Hugging Face's ``GPT2LMHeadModel`` weights.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from tutorial_lib.blocks import NormPlacement, TransformerBlock, make_norm
from tutorial_lib.embeddings import LearnedPositionalEmbedding, TokenEmbedding, check_sequence_fits
from tutorial_lib.kv_cache import KVCache

GPT2_SIZES = {  # (d_model, n_heads, n_layers), from the GPT-2 paper's Table 2 and the released checkpoints
    "small": (768, 12, 12),
    "medium": (1024, 16, 24),
    "large": (1280, 20, 36),
    "xl": (1600, 25, 48),
}


@dataclass(frozen=True)
class GPTConfig:
    """The architecture of a GPT; defaults are GPT-2's. Training settings live elsewhere."""

    d_vocab: int
    n_ctx: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int | None = None  # None → 4 · d_model
    dropout: float = 0.0
    activation: str = "gelu_tanh"  # GPT-2's tanh approximation of GELU
    layer_norm_eps: float = 1e-5
    tie_embeddings: bool = True
    bias: bool = True
    placement: NormPlacement | str = NormPlacement.PRE  # a string such as "post" is converted
    fast_attention: bool = False  # True: PyTorch's fused kernel; False: the readable chapter-03 path
    fast_norm: bool = False  # True: PyTorch's fused LayerNorm; False: the from-scratch formula (same numbers)

    def __post_init__(self) -> None:
        for name in ("d_vocab", "n_ctx", "d_model", "n_heads", "n_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", self.default_d_ff())  # frozen: set the derived default once
        elif isinstance(self.d_ff, bool) or not isinstance(self.d_ff, int) or self.d_ff < 1:
            raise ValueError(f"d_ff must be a positive int or None, got {self.d_ff!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        object.__setattr__(self, "placement", NormPlacement(self.placement))

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def default_d_ff(self) -> int:
        """The feed-forward width when ``d_ff`` is not given: 4 · d_model."""
        return 4 * self.d_model

    @classmethod
    def gpt2(cls, size: str = "small", **overrides) -> GPTConfig:
        """GPT-2 ``"small"`` (124M), ``"medium"`` (355M), ``"large"`` (774M) or ``"xl"`` (1558M)."""
        if size not in GPT2_SIZES:
            raise ValueError(f"size must be one of {list(GPT2_SIZES)}, got {size!r}")
        d_model, n_heads, n_layers = GPT2_SIZES[size]
        return cls(**{"d_vocab": 50257, "n_ctx": 1024, "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers, **overrides})

    def replace(self, **changes) -> GPTConfig:
        """A copy with ``changes``; a derived ``d_ff`` is derived again from the new sizes."""
        if "d_ff" not in changes and self.d_ff == self.default_d_ff():
            changes["d_ff"] = None
        return dataclasses.replace(self, **changes)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = TokenEmbedding(cfg.d_vocab, cfg.d_model)
        self.pos_embed = self.make_position_embedding(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(self.make_block(cfg) for _ in range(cfg.n_layers))
        # Pre-norm leaves the residual stream un-normalised after the last block: one more norm before the unembedding.
        self.ln_final = self.make_final_norm(cfg) if cfg.placement is not NormPlacement.POST else nn.Identity()
        self.unembed = nn.Linear(cfg.d_model, cfg.d_vocab, bias=False)
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight  # one matrix, used twice (Press & Wolf 2017)
        gpt2_init_(self)

    def forward(self, tokens: Int[Tensor, "batch seq"], cache: KVCache | None = None) -> Float[Tensor, "batch seq d_vocab"]:
        """Logits for the next token at every position. With ``cache``, ``tokens`` continue the cached positions."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (batch, seq), got {tuple(tokens.shape)}")
        offset = 0 if cache is None else cache.length
        check_sequence_fits(offset + tokens.shape[1], self.cfg.n_ctx)
        x = self.embed(tokens)
        if self.pos_embed is not None:
            x = x + self.pos_embed(tokens.shape[1], offset)
        x = self.dropout(x)
        for i, block in enumerate(self.blocks):
            x = block(x, causal=True, cache=None if cache is None else cache[i])
        return self.unembed(self.ln_final(x))

    # Construction hooks: a variant (e.g. models.llama) overrides only what it changes.
    def make_position_embedding(self, cfg: GPTConfig) -> nn.Module | None:
        """GPT-2's learned positions; ``None`` for a model whose attention encodes positions itself (RoPE)."""
        return LearnedPositionalEmbedding(cfg.n_ctx, cfg.d_model)

    def make_block(self, cfg: GPTConfig) -> nn.Module:
        return TransformerBlock(
            cfg.d_model, cfg.n_heads, cfg.d_ff, placement=cfg.placement, eps=cfg.layer_norm_eps,
            activation=cfg.activation, bias=cfg.bias, dropout=cfg.dropout, fast_attention=cfg.fast_attention,
            fast_norm=cfg.fast_norm,
        )

    def make_final_norm(self, cfg: GPTConfig) -> nn.Module:
        return make_norm("layer", cfg.d_model, cfg.layer_norm_eps, fast=cfg.fast_norm)

    def make_kv_cache(self, batch: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``n_ctx`` positions."""
        weight = self.embed.weight
        return KVCache(
            self.cfg.n_layers, batch, self.cfg.n_heads, self.cfg.n_ctx, self.cfg.d_head,
            device=device or weight.device, dtype=dtype or weight.dtype,
        )

    @classmethod
    def from_gpt2_state_dict(cls, state_dict: dict[str, Tensor], cfg: GPTConfig) -> GPT:
        """Build a GPT from a Hugging Face ``GPT2LMHeadModel`` state dict (strict: every key used, every shape checked)."""
        model = cls(cfg)
        model.load_state_dict(_gpt2_key_map(state_dict, cfg), strict=True)
        return model


def gpt2_init_(model: GPT, *, scale_residual: bool = True) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases, unit norms; the projections that write into the
    residual stream (attention W^O and the FFN's second matrix) get std 0.02/√(2·n_layers), so the stream's variance
    does not grow with depth (each of the 2·n_layers residual branches adds its variance)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (TokenEmbedding, LearnedPositionalEmbedding)):
            nn.init.normal_(module.weight, std=0.02)
    if scale_residual:
        std = 0.02 / math.sqrt(2 * model.cfg.n_layers)
        for block in model.blocks:
            nn.init.normal_(block.attn.out_proj.weight, std=std)
            nn.init.normal_(block.ffn.down.weight, std=std)


def _gpt2_key_map(hf: dict[str, Tensor], cfg: GPTConfig) -> dict[str, Tensor]:
    """Hugging Face GPT-2 names → ours. GPT-2's ``Conv1D`` stores weights as (in, out): transpose them."""
    hf = {k.removeprefix("transformer."): v for k, v in hf.items()}
    hf = {k: v for k, v in hf.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # causal-mask buffers
    used: set[str] = set()

    def take(key: str, shape: tuple[int, ...], transpose: bool = False) -> Tensor:
        if key not in hf:
            raise KeyError(f"GPT-2 state dict has no {key!r}")
        tensor = hf[key].t() if transpose else hf[key]
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{key}: expected shape {shape}, got {tuple(tensor.shape)} (does cfg match the checkpoint?)")
        used.add(key)
        return tensor

    d, d_ff, out = cfg.d_model, cfg.d_ff, {}
    out["embed.weight"] = take("wte.weight", (cfg.d_vocab, d))
    out["pos_embed.weight"] = take("wpe.weight", (cfg.n_ctx, d))
    for i in range(cfg.n_layers):
        h, ours = f"h.{i}.", f"blocks.{i}."
        qkv_w = take(h + "attn.c_attn.weight", (3 * d, d), transpose=True)
        qkv_b = take(h + "attn.c_attn.bias", (3 * d,))
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[ours + f"attn.{name}.weight"] = qkv_w[j * d : (j + 1) * d]
            out[ours + f"attn.{name}.bias"] = qkv_b[j * d : (j + 1) * d]
        out[ours + "attn.out_proj.weight"] = take(h + "attn.c_proj.weight", (d, d), transpose=True)
        out[ours + "attn.out_proj.bias"] = take(h + "attn.c_proj.bias", (d,))
        out[ours + "ffn.up.weight"] = take(h + "mlp.c_fc.weight", (d_ff, d), transpose=True)
        out[ours + "ffn.up.bias"] = take(h + "mlp.c_fc.bias", (d_ff,))
        out[ours + "ffn.down.weight"] = take(h + "mlp.c_proj.weight", (d, d_ff), transpose=True)
        out[ours + "ffn.down.bias"] = take(h + "mlp.c_proj.bias", (d,))
        for ln, residual in (("ln_1", "attn_residual"), ("ln_2", "ffn_residual")):
            out[ours + f"{residual}.norm.weight"] = take(h + f"{ln}.weight", (d,))
            out[ours + f"{residual}.norm.bias"] = take(h + f"{ln}.bias", (d,))
    out["ln_final.weight"] = take("ln_f.weight", (d,))
    out["ln_final.bias"] = take("ln_f.bias", (d,))
    if "lm_head.weight" in hf:
        out["unembed.weight"] = take("lm_head.weight", (cfg.d_vocab, d))
        # GPT-2 ties lm_head to wte; loading two different matrices into one tied parameter would silently drop one.
        if cfg.tie_embeddings and not torch.equal(out["unembed.weight"], out["embed.weight"]):
            raise ValueError("cfg.tie_embeddings is True but lm_head.weight differs from wte.weight")
    elif not cfg.tie_embeddings:
        raise KeyError("GPT-2 state dict has no 'lm_head.weight' but cfg.tie_embeddings is False")
    else:
        out["unembed.weight"] = out["embed.weight"]
    unused = set(hf) - used
    if unused:
        raise KeyError(f"GPT-2 state dict keys not mapped: {sorted(unused)[:5]}")
    return {k: v.detach().clone() for k, v in out.items()}
