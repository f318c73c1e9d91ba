"""A LLaMA-style GPT (Touvron et al. 2023), chapter 12: GPT-2's architecture with four modern swaps.

Main differences with :class:`~tutorial_lib.models.gpt.GPT`, and nothing else:

1. **RoPE instead of learned positions**: no ``pos_embed``; queries and keys are rotated inside every attention
   layer (:class:`~tutorial_lib.rope.RotaryMultiHeadAttention`).
2. **RMSNorm instead of LayerNorm**, still pre-norm, with a final norm.
3. **SwiGLU feed-forward** with ``d_ff ≈ 8/3 · d_model`` (same parameters as a 4 · d_model FFN), rounded up to a
   multiple of ``multiple_of``.
4. **No biases** anywhere, and an **untied** output head (configurable).

:meth:`Llama.from_hf_llama_state_dict` loads Hugging Face's ``LlamaForCausalLM`` weights (same rotate-half layout),
grouped-query checkpoints included.

Grouped-query attention (:class:`GroupedQueryAttention`, LLaMA 2 70B and every LLaMA 3): ``n_kv_heads`` key/value
heads, each shared by ``n_heads / n_kv_heads`` query heads; ``n_kv_heads = n_heads`` is multi-head attention,
``n_kv_heads = 1`` multi-query attention. The KV cache keeps ``n_kv_heads`` heads per layer.

Two GPTs that differ from GPT-2 by their positions alone, for chapter 12's comparisons: :class:`RotaryGPT` (change 1
and nothing else) and :class:`SinusoidalGPT` (the paper's §3.5 encoding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from einops import repeat
from jaxtyping import Float
from torch import Tensor, nn

from tutorial_lib.blocks import TransformerBlock
from tutorial_lib.embeddings import SinusoidalPositionalEncoding
from tutorial_lib.kv_cache import KVCache, LayerKVCache
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.multi_head import split_heads
from tutorial_lib.normalization import RMSNorm
from tutorial_lib.rope import RotaryMultiHeadAttention


def llama_d_ff(d_model: int, multiple_of: int) -> int:
    """LLaMA's hidden size: ⌊8/3 · d_model⌋ rounded up to a multiple of ``multiple_of`` (4096, 256 → 11008).

    Three matrices of ``d_model × 8/3·d_model`` hold as many parameters as the two ``d_model × 4·d_model`` of
    GPT's FFN; the rounding keeps the matrix shapes friendly to the hardware.
    """
    for name, value in (("d_model", d_model), ("multiple_of", multiple_of)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return multiple_of * math.ceil(int(8 * d_model / 3) / multiple_of)


@dataclass(frozen=True)
class LlamaConfig(GPTConfig):
    """Main difference with :class:`GPTConfig`: LLaMA's defaults, plus the RoPE ``rope_base``, ``multiple_of`` and
    the number of key/value heads ``n_kv_heads``.

    ``d_ff=None`` means :func:`llama_d_ff`; ``n_kv_heads=None`` means ``n_heads`` (multi-head attention);
    ``layer_norm_eps`` is the RMSNorm's ε here (LLaMA's 1e-6).
    """

    d_ff: int | None = None  # None → llama_d_ff(d_model, multiple_of)
    activation: str = "swiglu"
    layer_norm_eps: float = 1e-6
    tie_embeddings: bool = False
    bias: bool = False
    rope_base: float = 10000.0
    multiple_of: int = 32  # LLaMA used 256 (for d_model ≥ 4096); 32 keeps d_ff ≈ 8/3·d_model for small models
    n_kv_heads: int | None = None  # None → n_heads; 1 → multi-query attention

    def default_d_ff(self) -> int:
        return llama_d_ff(self.d_model, self.multiple_of)  # also validates multiple_of

    def __post_init__(self) -> None:
        if isinstance(self.multiple_of, bool) or not isinstance(self.multiple_of, int) or self.multiple_of < 1:
            raise ValueError(f"multiple_of must be a positive int, got {self.multiple_of!r}")
        if not self.rope_base > 1.0:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base!r}")
        super().__post_init__()
        if self.d_head % 2:
            raise ValueError(f"d_model / n_heads = {self.d_head} must be even: RoPE rotates pairs of dimensions")
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)  # frozen: set the derived default once
        _check_n_kv_heads(self.n_kv_heads, self.n_heads)

    def replace(self, **changes) -> LlamaConfig:
        """A copy with ``changes``; a derived ``n_kv_heads`` (equal to ``n_heads``) follows a new ``n_heads``."""
        if "n_kv_heads" not in changes and self.n_kv_heads == self.n_heads:
            changes["n_kv_heads"] = None
        return super().replace(**changes)


def _check_n_kv_heads(n_kv_heads: int, n_heads: int) -> None:
    if isinstance(n_kv_heads, bool) or not isinstance(n_kv_heads, int) or n_kv_heads < 1:
        raise ValueError(f"n_kv_heads must be a positive int or None, got {n_kv_heads!r}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} must be divisible by n_kv_heads={n_kv_heads}: each key/value head serves "
                         f"a group of n_heads / n_kv_heads query heads")


def repeat_kv(x: Float[Tensor, "batch n_kv_heads seq d_head"], n_rep: int) -> Float[Tensor, "batch n_heads seq d_head"]:
    """Each key/value head written ``n_rep`` times in a row: head ``h`` of the result is head ``h // n_rep`` of ``x``,
    so the ``n_rep`` consecutive query heads of one group read the same keys and values (Hugging Face's ``repeat_kv``).

    ``x.repeat(1, n_rep, 1, 1)`` would tile the heads instead (head ``h`` reading head ``h % n_kv_heads``): the same
    shape, other groups, and a checkpoint trained with consecutive groups computes something else.
    """
    if isinstance(n_rep, bool) or not isinstance(n_rep, int) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive int, got {n_rep!r}")
    return repeat(x, "batch n_kv_heads seq d_head -> batch (n_kv_heads n_rep) seq d_head", n_rep=n_rep)


class GroupedQueryAttention(RotaryMultiHeadAttention):
    """Main difference with :class:`~tutorial_lib.rope.RotaryMultiHeadAttention`: ``n_kv_heads`` key/value heads for
    ``n_heads`` query heads (Ainslie et al. 2023), each shared by a group of ``n_heads / n_kv_heads`` consecutive query
    heads. ``n_kv_heads = n_heads`` is multi-head attention (the same module, the same parameters); ``n_kv_heads = 1``
    is multi-query attention (Shazeer 2019).

    W^K and W^V shrink to ``n_kv_heads · d_head`` rows, and so does the KV cache: keys and values are stored as
    computed, and repeated for the query heads only when the scores are taken.
    """

    def __init__(self, d_model: int, n_heads: int, n_ctx: int, *, n_kv_heads: int | None = None, base: float = 10000.0,
                 bias: bool = False, fast: bool = False) -> None:
        super().__init__(d_model, n_heads, n_ctx, base=base, bias=bias, fast=fast)
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        _check_n_kv_heads(self.n_kv_heads, n_heads)
        if self.n_kv_heads != n_heads:  # only then: multi-head attention keeps its modules, and its random draws
            self.k_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)
            self.v_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)

    def _heads(self, x: Tensor, context: Tensor | None, cache: LayerKVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        if context is not None:
            raise ValueError("context must be None: rotary attention is self-attention only")
        q = split_heads(self.q_proj(x), self.n_heads)
        k, v = split_heads(self.k_proj(x), self.n_kv_heads), split_heads(self.v_proj(x), self.n_kv_heads)
        offset = 0 if cache is None else cache.length
        q, k = self.rope(q, offset=offset), self.rope(k, offset=offset)
        if cache is not None:
            k, v = cache.append(k, v)  # n_kv_heads heads stored: the memory GQA saves
        n_rep = self.n_heads // self.n_kv_heads
        return q, repeat_kv(k, n_rep), repeat_kv(v, n_rep)


class RotaryGPT(GPT):
    """Main difference with :class:`GPT`: RoPE inside every attention layer instead of learned positions (LLaMA's
    change 1 alone: LayerNorm, ReLU or GELU, biases and the tied head stay GPT-2's)."""

    def make_position_embedding(self, cfg: GPTConfig) -> None:
        return None

    def make_block(self, cfg: GPTConfig) -> TransformerBlock:
        block = super().make_block(cfg)
        block.attn = RotaryMultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.n_ctx, bias=cfg.bias, fast=cfg.fast_attention)
        return block


class SinusoidalGPT(GPT):
    """Main difference with :class:`GPT`: the paper's fixed sinusoidal encoding (§3.5) instead of learned positions,
    and token embeddings multiplied by √d_model as §3.4 does, so that the tokens are not drowned by an encoding of
    size 1 (GPT-2's token embeddings start at std 0.02)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.embed.scale = math.sqrt(cfg.d_model)

    def make_position_embedding(self, cfg: GPTConfig) -> SinusoidalPositionalEncoding:
        return SinusoidalPositionalEncoding(cfg.n_ctx, cfg.d_model)


class UnscaledSinusoidalGPT(SinusoidalGPT):
    """Main difference with :class:`SinusoidalGPT`: the token embeddings are *not* multiplied by √d_model, so GPT-2's
    tokens (std 0.02) enter beside an encoding whose entries are as large as 1 (chapter 12's control row)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.embed.scale = 1.0


class PaperInitSinusoidalGPT(SinusoidalGPT):
    """Main difference with :class:`SinusoidalGPT`: token embeddings initialised with std 1/√d_model (the paper's
    tied embedding, as :class:`~tutorial_lib.embeddings.TokenEmbedding` with ``scale=True`` draws it), so that after
    the √d_model of §3.4 a token's entries are of size 1, as large as the encoding's, instead of 0.02 · √d_model."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)


class LlamaBlock(TransformerBlock):
    """Main difference with :class:`TransformerBlock`: RMSNorm, and rotary attention with ``cfg.n_kv_heads``
    key/value heads in place of ``attn``."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__(
            cfg.d_model, cfg.n_heads, cfg.d_ff, placement=cfg.placement, norm="rms", eps=cfg.layer_norm_eps,
            activation=cfg.activation, bias=cfg.bias, dropout=cfg.dropout, fast_attention=cfg.fast_attention,
            fast_norm=cfg.fast_norm,
        )
        self.attn = GroupedQueryAttention(
            cfg.d_model, cfg.n_heads, cfg.n_ctx, n_kv_heads=cfg.n_kv_heads, base=cfg.rope_base, bias=cfg.bias,
            fast=cfg.fast_attention,
        )


class Llama(GPT):
    """A GPT with LLaMA's changes (see the module docstring). ``forward``, ``make_kv_cache`` and ``cfg.n_ctx`` work as
    for :class:`GPT`, so :func:`~tutorial_lib.sampling.generate` and the training loop take either model."""

    def __init__(self, cfg: LlamaConfig) -> None:
        if not isinstance(cfg, LlamaConfig):
            raise ValueError(f"cfg must be a LlamaConfig, got {type(cfg).__name__}")
        super().__init__(cfg)

    def make_position_embedding(self, cfg: LlamaConfig) -> None:
        return None  # 1. positions enter through RoPE, inside attention

    def make_block(self, cfg: LlamaConfig) -> LlamaBlock:
        return LlamaBlock(cfg)  # 2.-4.

    def make_final_norm(self, cfg: LlamaConfig) -> RMSNorm:
        return RMSNorm(cfg.d_model, cfg.layer_norm_eps, fast=cfg.fast_norm)

    def make_kv_cache(self, batch: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``n_ctx`` positions, ``n_kv_heads`` heads per layer."""
        weight = self.embed.weight
        return KVCache(
            self.cfg.n_layers, batch, self.cfg.n_kv_heads, self.cfg.n_ctx, self.cfg.d_head,
            device=device or weight.device, dtype=dtype or weight.dtype,
        )

    @classmethod
    def from_hf_llama_state_dict(cls, state_dict: dict[str, Tensor], cfg: LlamaConfig) -> Llama:
        """Build from a Hugging Face ``LlamaForCausalLM`` state dict (strict: every key used, every shape checked).

        Hugging Face's LLaMA uses the same rotate-half RoPE layout as :mod:`tutorial_lib.rope`, so q and k weights
        copy across unpermuted. A grouped-query checkpoint (``num_key_value_heads`` < ``num_attention_heads``) loads
        into ``cfg.n_kv_heads`` key/value heads; Hugging Face's groups are consecutive query heads, as ours.
        """
        model = cls(cfg)
        model.load_state_dict(_hf_llama_key_map(state_dict, cfg), strict=True)
        return model


def _hf_llama_key_map(hf: dict[str, Tensor], cfg: LlamaConfig) -> dict[str, Tensor]:
    """Hugging Face LLaMA names → ours (``nn.Linear`` both sides: no transposes)."""
    used: set[str] = set()

    def take(key: str, shape: tuple[int, ...]) -> Tensor:
        if key not in hf:
            raise KeyError(f"LLaMA state dict has no {key!r}")
        if tuple(hf[key].shape) != shape:
            raise ValueError(f"{key}: expected shape {shape}, got {tuple(hf[key].shape)} (does cfg match the checkpoint?)")
        used.add(key)
        return hf[key]

    d, d_ff, out = cfg.d_model, cfg.d_ff, {}
    d_kv = cfg.n_kv_heads * cfg.d_head  # the rows of W^K and W^V: d_model unless the attention is grouped
    out["embed.weight"] = take("model.embed_tokens.weight", (cfg.d_vocab, d))
    for i in range(cfg.n_layers):
        h, ours = f"model.layers.{i}.", f"blocks.{i}."
        for hf_name, name, rows in (("q_proj", "q_proj", d), ("k_proj", "k_proj", d_kv), ("v_proj", "v_proj", d_kv),
                                    ("o_proj", "out_proj", d)):
            out[ours + f"attn.{name}.weight"] = take(h + f"self_attn.{hf_name}.weight", (rows, d))
            if cfg.bias:
                out[ours + f"attn.{name}.bias"] = take(h + f"self_attn.{hf_name}.bias", (rows,))
        for name, shape in (("gate", (d_ff, d)), ("up", (d_ff, d)), ("down", (d, d_ff))):
            out[ours + f"ffn.{name}.weight"] = take(h + f"mlp.{name}_proj.weight", shape)
            if cfg.bias:
                out[ours + f"ffn.{name}.bias"] = take(h + f"mlp.{name}_proj.bias", shape[:1])
        out[ours + "attn_residual.norm.weight"] = take(h + "input_layernorm.weight", (d,))
        out[ours + "ffn_residual.norm.weight"] = take(h + "post_attention_layernorm.weight", (d,))
    out["ln_final.weight"] = take("model.norm.weight", (d,))
    if cfg.tie_embeddings:
        out["unembed.weight"] = out["embed.weight"]
        # A tied checkpoint may list the shared matrix under both names; it must then be the same matrix.
        if "lm_head.weight" in hf and not torch.equal(take("lm_head.weight", (cfg.d_vocab, d)), out["embed.weight"]):
            raise ValueError("cfg.tie_embeddings is True but lm_head.weight differs from model.embed_tokens.weight")
    else:
        out["unembed.weight"] = take("lm_head.weight", (cfg.d_vocab, d))
    unused = set(hf) - used
    if unused:
        raise KeyError(f"LLaMA state dict keys not mapped: {sorted(unused)[:5]}")
    return {k: v.detach().clone() for k, v in out.items()}
