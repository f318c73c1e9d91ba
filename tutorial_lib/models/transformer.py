"""The encoder-decoder Transformer of "Attention Is All You Need" (chapter 07).

source tokens → embedding × √d_model (§3.4) + sinusoidal positions (§3.5) → dropout (§5.4) → ``N`` encoder blocks
(bidirectional self-attention with the source padding mask, feed-forward) → the *memory*;
target tokens (shifted right, BOS first) → the same embedding and positions → ``N`` decoder blocks (causal
self-attention, cross-attention over the memory, feed-forward) → a linear map to the target vocabulary.

§3.4 shares one matrix between the source embedding, the target embedding and that pre-softmax projection; this
needs one vocabulary for both languages (the paper's 37,000 byte-pair tokens for English-German).

Norm placement. The paper is post-norm (``LayerNorm(x + Sublayer(x))``), so each stack's output is already
normalised and the paper has no final norm. With pre-norm (or sandwich) the residual stream leaves the last block
un-normalised, so each stack ends with one more norm. ``nn.Transformer`` *always* adds those two final norms, even
post-norm; ``TransformerConfig(final_norm=True)`` reproduces that.

Incremental decoding. The decoder's self-attention keeps its keys and values in a :class:`KVCache`. The
cross-attention's keys and values (projections of the fixed memory) are recomputed at every step: the decoder block
takes the memory as an argument, so no second cache is needed, at the cost of ``2·src_len·d_model²`` extra
multiply-adds per layer and step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from tutorial_lib.attention import padding_mask
from tutorial_lib.blocks import DecoderBlock, NormPlacement, TransformerBlock, make_norm
from tutorial_lib.embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from tutorial_lib.kv_cache import KVCache
from tutorial_lib.validation import check_positive_int as _check_positive_int


@dataclass(frozen=True)
class TransformerConfig:
    """The architecture of an encoder-decoder Transformer; defaults are the paper's base model (Table 3).

    Give one shared vocabulary ``d_vocab`` or two, ``src_vocab`` and ``tgt_vocab`` (then ``share_embeddings=False``);
    after validation ``src_vocab`` and ``tgt_vocab`` are always set. ``n_layers`` is the depth of each stack unless
    ``n_encoder_layers`` / ``n_decoder_layers`` say otherwise; ``final_norm=None`` means "a final norm after each
    stack unless post-norm". Use :meth:`replace`, which re-derives these, to change a config.
    """

    n_ctx: int
    d_vocab: int | None = None
    src_vocab: int | None = None
    tgt_vocab: int | None = None
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    n_encoder_layers: int | None = None
    n_decoder_layers: int | None = None
    d_ff: int = 2048
    dropout: float = 0.1
    placement: NormPlacement | str = NormPlacement.POST
    activation: str = "relu"
    eps: float = 1e-5  # the paper gives none; nn.LayerNorm's and nn.Transformer's default
    share_embeddings: bool = True
    positional: str = "sinusoidal"  # or "learned" (Table 3, row E)
    final_norm: bool | None = None
    bias: bool = True
    fast_attention: bool = False  # True: PyTorch's fused kernel; False: the readable chapter-03 path
    fast_norm: bool = False  # True: PyTorch's fused LayerNorm; False: the from-scratch formula (same numbers)

    def __post_init__(self) -> None:
        for name in ("n_ctx", "d_model", "n_heads", "n_layers", "d_ff"):  # frozen: np.int64(5) is stored as 5
            object.__setattr__(self, name, _check_positive_int(name, getattr(self, name)))
        for name in ("d_vocab", "src_vocab", "tgt_vocab", "n_encoder_layers", "n_decoder_layers"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _check_positive_int(name, getattr(self, name)))
        if self.d_vocab is None:
            if self.src_vocab is None or self.tgt_vocab is None:
                raise ValueError("give d_vocab (one shared vocabulary) or both src_vocab and tgt_vocab")
        else:
            for name in ("src_vocab", "tgt_vocab"):
                if getattr(self, name) not in (None, self.d_vocab):
                    raise ValueError(f"{name}={getattr(self, name)} must equal d_vocab={self.d_vocab} or be None")
                object.__setattr__(self, name, self.d_vocab)  # frozen: set the derived value once
        if self.share_embeddings and self.d_vocab is None:
            raise ValueError(
                "share_embeddings=True (§3.4) needs one shared vocabulary: give d_vocab, or set share_embeddings=False"
            )
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")
        if self.activation not in ("relu", "gelu", "gelu_tanh", "swiglu"):
            raise ValueError(f"activation must be 'relu', 'gelu', 'gelu_tanh' or 'swiglu', got {self.activation!r}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        try:
            object.__setattr__(self, "placement", NormPlacement(self.placement))
        except ValueError:
            raise ValueError(f"placement must be one of {[p.value for p in NormPlacement]}, got {self.placement!r}") from None
        if self.n_encoder_layers is None:
            object.__setattr__(self, "n_encoder_layers", self.n_layers)
        if self.n_decoder_layers is None:
            object.__setattr__(self, "n_decoder_layers", self.n_layers)
        if self.final_norm is None:
            object.__setattr__(self, "final_norm", self.placement is not NormPlacement.POST)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def base(cls, **overrides) -> TransformerConfig:
        """Table 3's base model: N = 6, d_model = 512, d_ff = 2048, h = 8, P_drop = 0.1, with the shared 37,000-token
        English-German vocabulary. The paper gives no maximum length; ``n_ctx=512`` holds WMT sentence pairs."""
        return cls(**{"d_vocab": 37000, "n_ctx": 512, **overrides})

    @classmethod
    def big(cls, **overrides) -> TransformerConfig:
        """Table 3's big model: d_model = 1024, d_ff = 4096, h = 16, P_drop = 0.3 (English-German)."""
        return cls.base(**{"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3, **overrides})

    def replace(self, **changes) -> TransformerConfig:
        """``dataclasses.replace`` that re-derives derived fields: changing ``n_layers`` also resets the per-stack
        depths, ``d_vocab`` the per-side vocabularies, ``placement`` the final norm (unless those change too)."""
        derived_from = {
            "n_layers": ("n_encoder_layers", "n_decoder_layers"),
            "d_vocab": ("src_vocab", "tgt_vocab"),
            "src_vocab": ("d_vocab",),
            "tgt_vocab": ("d_vocab",),
            "placement": ("final_norm",),
        }
        for source, derived in derived_from.items():
            if source in changes:
                for name in derived:
                    changes.setdefault(name, None)
        return dataclasses.replace(self, **changes)


class Encoder(nn.Module):
    """``n_encoder_layers`` bidirectional :class:`TransformerBlock` s, then the final norm (or the identity)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            TransformerBlock(
                cfg.d_model, cfg.n_heads, cfg.d_ff, placement=cfg.placement, eps=cfg.eps, activation=cfg.activation,
                bias=cfg.bias, dropout=cfg.dropout, fast_attention=cfg.fast_attention, fast_norm=cfg.fast_norm,
            )
            for _ in range(cfg.n_encoder_layers)
        )
        self.norm = make_norm("layer", cfg.d_model, cfg.eps, fast=cfg.fast_norm) if cfg.final_norm else nn.Identity()

    def forward(
        self, x: Float[Tensor, "batch seq d_model"], *, mask: Bool[Tensor, "..."] | None = None
    ) -> Float[Tensor, "batch seq d_model"]:
        for layer in self.layers:
            x = layer(x, mask=mask)
        return self.norm(x)


class Decoder(nn.Module):
    """``n_decoder_layers`` :class:`DecoderBlock` s (causal self-attention, cross-attention, FFN), then the final norm."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderBlock(
                cfg.d_model, cfg.n_heads, cfg.d_ff, placement=cfg.placement, eps=cfg.eps, activation=cfg.activation,
                bias=cfg.bias, dropout=cfg.dropout, fast_attention=cfg.fast_attention, fast_norm=cfg.fast_norm,
            )
            for _ in range(cfg.n_decoder_layers)
        )
        self.norm = make_norm("layer", cfg.d_model, cfg.eps, fast=cfg.fast_norm) if cfg.final_norm else nn.Identity()

    def forward(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        memory: Float[Tensor, "batch key_pos d_model"],
        *,
        memory_mask: Bool[Tensor, "..."] | None = None,
        cache: KVCache | None = None,
    ) -> Float[Tensor, "batch query_pos d_model"]:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, memory_mask=memory_mask, cache=None if cache is None else cache[i])
        return self.norm(x)


class Transformer(nn.Module):
    """The paper's model. Source positions are the cross-attention's ``key_pos``, target positions its ``query_pos``.

    Masks follow the package's convention (True = may attend). The source mask is the ``(batch, 1, key_pos)``
    padding mask of :func:`~tutorial_lib.attention.padding_mask`; it hides padding from the encoder's
    self-attention and from the decoder's cross-attention. The target needs no padding mask: right-padding comes
    after every real token, so the causal mask already hides it, and the loss ignores the padded positions.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.src_embed = TokenEmbedding(cfg.src_vocab, cfg.d_model, scale=True)
        self.tgt_embed = TokenEmbedding(cfg.tgt_vocab, cfg.d_model, scale=True)
        if cfg.positional == "sinusoidal":
            self.pos_embed = SinusoidalPositionalEncoding(cfg.n_ctx, cfg.d_model)
        else:  # one table read by both sides, like the sinusoidal one
            self.pos_embed = LearnedPositionalEmbedding(cfg.n_ctx, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        # The pre-softmax projection has no bias: with a shared matrix it is the embedding read backwards.
        self.unembed = nn.Linear(cfg.d_model, cfg.tgt_vocab, bias=False)
        if cfg.share_embeddings:  # §3.4: one matrix, used three times
            self.tgt_embed.weight = self.src_embed.weight
            self.unembed.weight = self.src_embed.weight
        transformer_init_(self)

    def encode(
        self, src: Int[Tensor, "batch seq"], src_mask: Bool[Tensor, "batch 1 seq"] | None = None
    ) -> Float[Tensor, "batch seq d_model"]:
        """The memory: one ``d_model`` vector per source position."""
        _check_tokens("src", src)
        _check_src_mask(src_mask, src)
        return self.encoder(self._embed(self.src_embed, src), mask=src_mask)

    def decode(
        self,
        tgt: Int[Tensor, "batch query_pos"],
        memory: Float[Tensor, "batch key_pos d_model"],
        src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None,
        *,
        cache: KVCache | None = None,
    ) -> Float[Tensor, "batch query_pos d_vocab"]:
        """Next-token logits at every target position. With ``cache``, ``tgt`` continues the cached positions."""
        _check_tokens("tgt", tgt)
        if memory.dim() != 3 or memory.shape[0] != tgt.shape[0]:
            raise ValueError(f"memory must have shape (batch={tgt.shape[0]}, key_pos, d_model), got {tuple(memory.shape)}")
        _check_src_mask(src_mask, memory)
        offset = 0 if cache is None else cache.length
        x = self._embed(self.tgt_embed, tgt, offset)
        return self.unembed(self.decoder(x, memory, memory_mask=src_mask, cache=cache))

    def forward(
        self,
        src: Int[Tensor, "batch key_pos"],
        tgt: Int[Tensor, "batch query_pos"],
        *,
        src_lengths: Int[Tensor, " batch"] | None = None,
        src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None,
    ) -> Float[Tensor, "batch query_pos d_vocab"]:
        """Teacher forcing: logits for ``tgt`` shifted left. Padding is given by ``src_lengths`` or ``src_mask``."""
        if src_lengths is not None:
            if src_mask is not None:
                raise ValueError("give src_lengths or src_mask, not both")
            if src_lengths.shape != (src.shape[0],):
                raise ValueError(f"src_lengths must have shape (batch,) = ({src.shape[0]},), got {tuple(src_lengths.shape)}")
            src_mask = padding_mask(src_lengths, src.shape[1])
        return self.decode(tgt, self.encode(src, src_mask), src_mask)

    def make_kv_cache(self, batch: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> KVCache:
        """An empty cache for the decoder's self-attention: ``batch`` sequences of up to ``n_ctx`` positions."""
        _check_positive_int("batch", batch)
        weight = self.unembed.weight
        return KVCache(
            self.cfg.n_decoder_layers, batch, self.cfg.n_heads, self.cfg.n_ctx, self.cfg.d_head,
            device=device or weight.device, dtype=dtype or weight.dtype,
        )

    def _embed(self, embed: TokenEmbedding, tokens: Tensor, offset: int = 0) -> Tensor:
        # §5.4: "dropout to the sums of the embeddings and the positional encodings" (the scale is inside embed).
        return self.dropout(embed(tokens) + self.pos_embed(tokens.shape[1], offset))


def transformer_init_(model: Transformer) -> None:
    """Xavier-uniform on every weight matrix of the two stacks, as ``nn.Transformer`` and the Annotated Transformer do.

    Each of W^Q, W^K, W^V is its own ``d_model × d_model`` matrix here (as in the Annotated Transformer), where
    ``nn.Transformer`` draws them as one ``3·d_model × d_model`` block with a smaller bound. Biases keep
    ``nn.Linear``'s default, norms start at the identity. The embedding keeps ``TokenEmbedding``'s N(0, 1/d_model):
    after the ×√d_model scale its entries have unit variance, the scale of the positional encoding (whose entries
    have variance 1/2), whereas Xavier on a 37,000 × 512 table would leave them ~4 times quieter than the positions.
    """
    for stack in (model.encoder, model.decoder):
        for p in stack.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)


def _check_tokens(name: str, tokens: Tensor) -> None:
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"{name} must have shape (batch, seq) with seq >= 1, got {tuple(tokens.shape)}")


def _check_src_mask(src_mask: Tensor | None, source: Tensor) -> None:
    """The source mask must be a bool ``(batch, 1, src_len)`` padding mask (True on real tokens)."""
    if src_mask is None:
        return
    expected = (source.shape[0], 1, source.shape[1])
    if src_mask.dtype != torch.bool or tuple(src_mask.shape) != expected:
        raise ValueError(
            f"src_mask must be a bool tensor of shape (batch, 1, src_len) = {expected}, True on real tokens "
            f"(see padding_mask); got dtype {src_mask.dtype} and shape {tuple(src_mask.shape)}"
        )
