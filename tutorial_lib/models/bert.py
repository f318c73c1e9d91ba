"""An encoder-only BERT (Devlin et al. 2019), chapter 14.

The paper's *encoder* alone: post-norm :class:`~tutorial_lib.blocks.TransformerBlock`\\ s, bidirectional (every
token sees every real token; only padding is masked), over the sum of token, learned position and segment
embeddings, normalised once more before the first block. Pre-trained on two tasks:

* **masked language modelling** (:func:`mask_tokens`, :class:`MLMHead`): 15% of the tokens are chosen, 80% of
  those become ``[MASK]``, 10% a random token, 10% stay; the model predicts the originals. Bidirectional attention
  is only possible because the answer is hidden in the *input*, not by a causal mask.
* **next-sentence prediction** (:class:`NSPHead`): from the ``[CLS]`` position, does segment B follow segment A?

Then fine-tuned with a fresh classifier (:class:`BERTForSequenceClassification`).
:meth:`BERTForPreTraining.from_hf_state_dict` loads Hugging Face's ``BertForPreTraining`` weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from tutorial_lib.blocks import NormPlacement, TransformerBlock
from tutorial_lib.embeddings import LearnedPositionalEmbedding, TokenEmbedding, check_sequence_fits, check_token_ids
from tutorial_lib.feed_forward import ACTIVATIONS
from tutorial_lib.normalization import LayerNorm

IGNORE_INDEX = -100  # label of the positions the MLM loss skips (PyTorch's cross-entropy default)

BERT_SIZES = {"base": (768, 12, 12), "large": (1024, 16, 24)}  # (d_model, n_heads, n_layers), the paper's §3


@dataclass(frozen=True)
class BERTConfig:
    """The architecture of a BERT; defaults are the paper's. Training settings live elsewhere."""

    d_vocab: int
    n_ctx: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int | None = None  # None → 4 · d_model
    n_segments: int = 2  # sentence A and sentence B
    dropout: float = 0.1
    eps: float = 1e-12  # every LayerNorm's ε (Google's checkpoints use 1e-12)
    activation: str = "gelu"  # the exact (erf) GELU
    fast_attention: bool = False
    fast_norm: bool = False

    def __post_init__(self) -> None:
        for name in ("d_vocab", "n_ctx", "d_model", "n_heads", "n_layers", "n_segments"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # frozen: set the derived default once
        elif isinstance(self.d_ff, bool) or not isinstance(self.d_ff, int) or self.d_ff < 1:
            raise ValueError(f"d_ff must be a positive int or None, got {self.d_ff!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def bert(cls, size: str = "base", **overrides) -> BERTConfig:
        """BERT ``"base"`` (110M) or ``"large"`` (340M), with the uncased WordPiece vocabulary (30,522)."""
        if size not in BERT_SIZES:
            raise ValueError(f"size must be one of {list(BERT_SIZES)}, got {size!r}")
        d_model, n_heads, n_layers = BERT_SIZES[size]
        return cls(**{"d_vocab": 30522, "n_ctx": 512, "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers, **overrides})

    def replace(self, **changes) -> BERTConfig:
        return dataclasses.replace(self, **changes)


class BERT(nn.Module):
    """The encoder: embeddings (token + position + segment, then LayerNorm and dropout) and post-norm blocks."""

    def __init__(self, cfg: BERTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = TokenEmbedding(cfg.d_vocab, cfg.d_model)
        self.pos_embed = LearnedPositionalEmbedding(cfg.n_ctx, cfg.d_model)
        self.segment_embed = nn.Embedding(cfg.n_segments, cfg.d_model)
        self.ln_embed = LayerNorm(cfg.d_model, cfg.eps, fast=cfg.fast_norm)  # post-norm blocks expect a normalised input
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                cfg.d_model, cfg.n_heads, cfg.d_ff, placement=NormPlacement.POST, eps=cfg.eps,
                activation=cfg.activation, dropout=cfg.dropout, fast_attention=cfg.fast_attention,
                fast_norm=cfg.fast_norm,
            )
            for _ in range(cfg.n_layers)
        )
        bert_init_(self)

    def forward(
        self,
        tokens: Int[Tensor, "batch seq"],
        segments: Int[Tensor, "batch seq"] | None = None,
        *,
        mask: Bool[Tensor, "batch #seq seq"] | None = None,
    ) -> Float[Tensor, "batch seq d_model"]:
        """One vector per token. ``segments`` (0 for sentence A, 1 for B; default all 0) and ``mask`` (True = may
        attend, e.g. :func:`~tutorial_lib.attention.padding_mask`, so that no token reads the padding)."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (batch, seq), got {tuple(tokens.shape)}")
        check_sequence_fits(tokens.shape[1], self.cfg.n_ctx)
        if segments is None:
            segments = torch.zeros_like(tokens)
        elif segments.shape != tokens.shape:
            raise ValueError(f"segments must have the shape of tokens {tuple(tokens.shape)}, got {tuple(segments.shape)}")
        elif segments.numel() and (segments.min() < 0 or segments.max() >= self.cfg.n_segments):
            raise ValueError(f"segments must be ids in [0, n_segments={self.cfg.n_segments}), got {segments.unique().tolist()}")
        x = self.embed(tokens) + self.pos_embed(tokens.shape[1]) + self.segment_embed(segments)
        x = self.dropout(self.ln_embed(x))
        for block in self.blocks:
            x = block(x, mask=mask)  # no causal mask: every token reads both directions
        return x


class MLMHead(nn.Module):
    """Masked-LM head: dense → activation → LayerNorm → the token embedding's transpose, plus a bias per token."""

    def __init__(self, cfg: BERTConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        self.activation = cfg.activation
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = LayerNorm(cfg.d_model, cfg.eps, fast=cfg.fast_norm)
        self.decoder = nn.Linear(cfg.d_model, cfg.d_vocab)
        self.decoder.weight = embedding.weight  # tied: the input and output vocabularies share one matrix

    def forward(self, hidden: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_vocab"]:
        return self.decoder(self.norm(ACTIVATIONS[self.activation](self.dense(hidden))))


class ClassificationHead(nn.Module):
    """BERT's pooler, a dense layer and tanh on the first (``[CLS]``) position, then dropout and a linear classifier.

    ``[CLS]`` carries no meaning of its own; through bidirectional attention it becomes a summary of the sequence.
    """

    def __init__(self, d_model: int, n_classes: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
            raise ValueError(f"n_classes must be an int >= 2, got {n_classes!r}")
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_classes)

    def forward(self, hidden: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch n_classes"]:
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        return self.classifier(self.dropout(pooled))


class NSPHead(ClassificationHead):
    """Main difference with :class:`ClassificationHead`: two classes, 0 = B follows A (IsNext), 1 = B is random
    (NotNext), as Hugging Face numbers them; no dropout before the classifier."""

    def __init__(self, d_model: int) -> None:
        super().__init__(d_model, 2)


class BERTForPreTraining(nn.Module):
    """The encoder with both pre-training heads; ``forward`` returns ``(mlm_logits, nsp_logits)``."""

    def __init__(self, cfg: BERTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.bert = BERT(cfg)
        self.mlm = MLMHead(cfg, self.bert.embed)
        self.nsp = NSPHead(cfg.d_model)
        bert_init_(self)

    def forward(
        self,
        tokens: Int[Tensor, "batch seq"],
        segments: Int[Tensor, "batch seq"] | None = None,
        *,
        mask: Bool[Tensor, "batch #seq seq"] | None = None,
    ) -> tuple[Float[Tensor, "batch seq d_vocab"], Float[Tensor, "batch 2"]]:
        hidden = self.bert(tokens, segments, mask=mask)
        return self.mlm(hidden), self.nsp(hidden)

    @classmethod
    def from_hf_state_dict(cls, state_dict: dict[str, Tensor], cfg: BERTConfig) -> BERTForPreTraining:
        """Build from a Hugging Face ``BertForPreTraining`` state dict (strict: every key used, every shape checked)."""
        model = cls(cfg)
        model.load_state_dict(_hf_bert_key_map(state_dict, cfg), strict=True)
        return model


class BERTForSequenceClassification(nn.Module):
    """The encoder and a fresh :class:`ClassificationHead`, for fine-tuning on a labelled task."""

    def __init__(self, cfg: BERTConfig, n_classes: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.bert = BERT(cfg)
        self.head = ClassificationHead(cfg.d_model, n_classes, dropout=cfg.dropout)
        bert_init_(self)

    def forward(
        self,
        tokens: Int[Tensor, "batch seq"],
        segments: Int[Tensor, "batch seq"] | None = None,
        *,
        mask: Bool[Tensor, "batch #seq seq"] | None = None,
    ) -> Float[Tensor, "batch n_classes"]:
        return self.head(self.bert(tokens, segments, mask=mask))

    @classmethod
    def from_pretraining(cls, pretrained: BERTForPreTraining, n_classes: int) -> BERTForSequenceClassification:
        """Start fine-tuning from a pre-trained model: its encoder and pooler are copied, the classifier is new."""
        model = cls(pretrained.cfg, n_classes)
        model.bert.load_state_dict(pretrained.bert.state_dict(), strict=True)
        model.head.pooler.load_state_dict(pretrained.nsp.pooler.state_dict(), strict=True)
        return model


def pretraining_loss(
    mlm_logits: Float[Tensor, "batch seq d_vocab"],
    nsp_logits: Float[Tensor, "batch 2"],
    labels: Int[Tensor, "batch seq"],
    is_random_next: Int[Tensor, " batch"],
) -> Float[Tensor, ""]:
    """BERT's loss: the cross-entropy of the masked tokens only (``labels`` is ``IGNORE_INDEX`` elsewhere, as
    :func:`mask_tokens` writes it) plus the NSP cross-entropy (``is_random_next``: 0 = IsNext, 1 = NotNext)."""
    mlm = F.cross_entropy(mlm_logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    return mlm + F.cross_entropy(nsp_logits, is_random_next)


def bert_init_(model: nn.Module) -> None:
    """BERT's initialisation: N(0, 0.02) for every weight matrix and embedding, zero biases, unit LayerNorms."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (nn.Embedding, TokenEmbedding, LearnedPositionalEmbedding)):
            nn.init.normal_(module.weight, std=0.02)


def mask_tokens(
    tokens: Int[Tensor, "*batch seq"],
    mask_id: int,
    d_vocab: int,
    special_ids: Sequence[int],
    generator: torch.Generator | None = None,
    p: float = 0.15,
) -> tuple[Int[Tensor, "*batch seq"], Int[Tensor, "*batch seq"]]:
    """BERT's masking: returns ``(inputs, labels)``.

    Each token that is not in ``special_ids`` is chosen with probability ``p``. A chosen token becomes ``mask_id``
    with probability 0.8, a random token with probability 0.1 (drawn uniformly from the non-special ids, so it may
    happen to be the original), and stays itself with probability 0.1: the model cannot learn that only ``[MASK]``
    positions matter, nor that an unmasked token is always right. ``labels`` holds the original id where a token was
    chosen and ``IGNORE_INDEX`` (-100) everywhere else. Seeded by ``generator`` (the same generator state gives the
    same result).
    """
    check_token_ids(tokens, d_vocab)
    if isinstance(mask_id, bool) or not isinstance(mask_id, int) or not 0 <= mask_id < d_vocab:
        raise ValueError(f"mask_id must be an int in [0, d_vocab={d_vocab}), got {mask_id!r}")
    special = sorted(set(special_ids))
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < d_vocab for i in special):
        raise ValueError(f"special_ids must be ints in [0, d_vocab={d_vocab}), got {list(special_ids)}")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must be in (0, 1], got {p!r}")
    ordinary = torch.ones(d_vocab, dtype=torch.bool)
    ordinary[special] = False
    ordinary_ids = ordinary.nonzero().squeeze(1)
    if not len(ordinary_ids):
        raise ValueError("special_ids must leave at least one ordinary token to draw random replacements from")
    draw_device = tokens.device if generator is None else generator.device
    chosen = torch.rand(tokens.shape, generator=generator, device=draw_device).to(tokens.device) < p
    chosen &= ordinary.to(tokens.device)[tokens]
    action = torch.rand(tokens.shape, generator=generator, device=draw_device).to(tokens.device)
    index = torch.randint(len(ordinary_ids), tokens.shape, generator=generator, device=draw_device)
    random_ids = ordinary_ids.to(draw_device)[index].to(tokens.device)
    inputs = torch.where(chosen & (action < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, IGNORE_INDEX)
    return inputs, labels


def _hf_bert_key_map(hf: dict[str, Tensor], cfg: BERTConfig) -> dict[str, Tensor]:
    """Hugging Face ``BertForPreTraining`` names → ours (``nn.Linear`` both sides: no transposes)."""
    hf = {k: v for k, v in hf.items() if not k.endswith(("embeddings.position_ids", "embeddings.token_type_ids"))}  # index buffers
    used: set[str] = set()

    def take(key: str, shape: tuple[int, ...]) -> Tensor:
        if key not in hf:
            raise KeyError(f"BERT state dict has no {key!r}")
        if tuple(hf[key].shape) != shape:
            raise ValueError(f"{key}: expected shape {shape}, got {tuple(hf[key].shape)} (does cfg match the checkpoint?)")
        used.add(key)
        return hf[key]

    def linear(ours: str, theirs: str, d_out: int, d_in: int) -> None:
        out[ours + ".weight"] = take(theirs + ".weight", (d_out, d_in))
        out[ours + ".bias"] = take(theirs + ".bias", (d_out,))

    def norm(ours: str, theirs: str) -> None:
        out[ours + ".weight"] = take(theirs + ".weight", (d,))
        out[ours + ".bias"] = take(theirs + ".bias", (d,))

    d, d_ff, out = cfg.d_model, cfg.d_ff, {}
    e = "bert.embeddings."
    out["bert.embed.weight"] = take(e + "word_embeddings.weight", (cfg.d_vocab, d))
    out["bert.pos_embed.weight"] = take(e + "position_embeddings.weight", (cfg.n_ctx, d))
    out["bert.segment_embed.weight"] = take(e + "token_type_embeddings.weight", (cfg.n_segments, d))
    norm("bert.ln_embed", e + "LayerNorm")
    for i in range(cfg.n_layers):
        h, ours = f"bert.encoder.layer.{i}.", f"bert.blocks.{i}."
        for theirs, name in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            linear(ours + f"attn.{name}", h + f"attention.self.{theirs}", d, d)
        linear(ours + "attn.out_proj", h + "attention.output.dense", d, d)
        norm(ours + "attn_residual.norm", h + "attention.output.LayerNorm")
        linear(ours + "ffn.up", h + "intermediate.dense", d_ff, d)
        linear(ours + "ffn.down", h + "output.dense", d, d_ff)
        norm(ours + "ffn_residual.norm", h + "output.LayerNorm")
    linear("nsp.pooler", "bert.pooler.dense", d, d)
    linear("nsp.classifier", "cls.seq_relationship", 2, d)
    p = "cls.predictions."
    linear("mlm.dense", p + "transform.dense", d, d)
    norm("mlm.norm", p + "transform.LayerNorm")
    out["mlm.decoder.weight"] = out["bert.embed.weight"]  # tied
    out["mlm.decoder.bias"] = take(p + "bias", (cfg.d_vocab,))
    # Hugging Face lists the tied decoder weight and bias again under the decoder's names: they must be the same.
    for key, ours in ((p + "decoder.weight", "bert.embed.weight"), (p + "decoder.bias", "mlm.decoder.bias")):
        if key in hf and not torch.equal(take(key, tuple(out[ours].shape)), out[ours]):
            raise ValueError(f"{key} must equal the tensor it is tied to ({ours})")
    unused = set(hf) - used
    if unused:
        raise KeyError(f"BERT state dict keys not mapped: {sorted(unused)[:5]}")
    return {k: v.detach().clone() for k, v in out.items()}
