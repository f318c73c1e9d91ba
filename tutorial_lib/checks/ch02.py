"""Chapter 02's exercises: the sinusoidal encoding of §3.5, positions read with an offset, the scaled token embedding.

- ``02.sinusoidal`` is compared with the package's table (float32) for even and odd ``d_model``; an odd width checks
  that the last column is a sine (its cosine partner does not exist).
- ``02.position_rows`` reads rows of a learned position table from ``offset`` on, as a KV cache needs when new tokens
  continue cached ones, and refuses (``ValueError``) a window that runs past the table.
- ``02.scaled_embedding`` looks up token vectors and multiplies them by √d_model (§3.4).
- ``02.embed_inputs`` (the build exercise) composes them into the Transformer's input layer: scaled token rows plus
  the position rows from ``offset`` on; the catalogue holds the composition mistakes (the sum scaled, positions looked up
  by token id or along the batch axis, the offset ignored).
- ``02.token_embedding`` and ``02.position_embedding`` (the build track's first modules): the learner's
  ``TokenEmbedding`` and ``PositionEmbedding`` hold their tables as the parameter ``weight`` and look them up
  themselves (no ``nn.Embedding``, ``F.embedding`` or package module); the checks put the case's table in by name and
  compare the rows and the table's gradient.
- ``02.predict_position_norm`` (predict, then measure) asks for the norm of one sinusoidal encoding: √(d_model / 2),
  since each (sin, cos) pair adds 1 to the squared norm.
- ``02.predict_position_recovered`` (predict, then measure, on sampled embeddings): how often the position can be read
  back exactly from the paper's input, a √d_model-scaled token embedding plus its encoding.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, register
from tutorial_lib.checks.modules import run_module
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    check_sequence_fits,
    sinusoidal_positional_encoding,
)

# --- 02.sinusoidal ------------------------------------------------------------------------------------------------------


def _sinusoidal_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(n_ctx=6, d_model=8),
        Case.of(n_ctx=50, d_model=16, note="positions up to 49"),
        Case.of(n_ctx=4, d_model=7, note="an odd d_model: the last column is a sine"),
        Case.of(n_ctx=1, d_model=2, note="one position"),
    ]


@mistake_builder
def _sinusoidal_like(*, swap=False, exponent="2i", first=0, layout="interleaved"):
    """A learner's table; each keyword reproduces one way of getting it wrong. ``exponent`` is what divides d_model in
    the exponent: "2i" (right), "i" (the pair's index), or "column" (the column's own index, so a pair's sine and
    cosine get different angles)."""

    def power(i, column, d_model):
        return {"2i": 2 * i, "i": i, "column": column}[exponent] / d_model

    def sinusoidal(n_ctx, d_model):
        pe = torch.zeros(n_ctx, d_model)
        half = (d_model + 1) // 2
        for pos in range(n_ctx):
            for i in range(half):
                columns = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, half + i)
                waves = (math.cos, math.sin) if swap else (math.sin, math.cos)
                for wave, column, slot in zip(waves, columns, (2 * i, 2 * i + 1)):
                    if column < d_model:
                        pe[pos, column] = wave((pos + first) / 10000 ** power(i, slot, d_model))
        return pe

    return sinusoidal


def _multiplied_by_the_frequency_term(n_ctx, d_model):
    position = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position * 10000 ** (two_i / d_model)
    pe = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()


def _transposed(n_ctx, d_model):
    return sinusoidal_positional_encoding(n_ctx, d_model).T.contiguous()


def _float64(n_ctx, d_model):
    return sinusoidal_positional_encoding(n_ctx, d_model).double()


SINUSOIDAL = Exercise(
    id="02.sinusoidal",
    forbidden=(SinusoidalPositionalEncoding,),
    reference=sinusoidal_positional_encoding,
    cases=_sinusoidal_cases,
    points=2,
    outputs=("the table",),
    axes={"the table": "position dimension"},
    tolerance=(0.0, 1e-5),
    checked=(
        "tables of 6 × 8, 50 × 16, 4 × 7 (an odd d_model) and 1 × 2, float32: sines in the even columns, cosines in "
        "the odd ones, angle pos / 10000^(2i / d_model)"
    ),
    mistakes=(
        Mistake("sin_cos_swapped", "put the cosines in the even columns and the sines in the odd ones",
                "§3.5: PE(pos, 2i) = sin, PE(pos, 2i + 1) = cos; row 0 is then 0, 1, 0, 1, …", (_sinusoidal_like(swap=True),)),
        Mistake("exponent_i_over_d", "used i / d_model in the exponent instead of 2i / d_model",
                "The i of the paper counts pairs of columns: the exponent of pair i is 2i / d_model, so the slowest "
                "pair's wavelength reaches 10000 · 2π.", (_sinusoidal_like(exponent="i"),)),
        Mistake("exponent_column_over_d", "used the column index in the exponent, so a cosine's angle differs from its "
                "sine's",
                "Columns 2i and 2i + 1 share one angle, pos / 10000^(2i / d_model): that shared angle is what makes "
                "each pair a point on a circle.", (_sinusoidal_like(exponent="column"),)),
        Mistake("halves_concatenated", "put all the sines in the first half and all the cosines in the second",
                "That layout (used by some libraries) is the same information in another column order; the paper, and "
                "every later chapter here, interleaves them: sin in 0, 2, 4, …, cos in 1, 3, 5, …",
                (_sinusoidal_like(layout="halves"),)),
        Mistake("positions_from_one", "numbered the positions from 1",
                "The first position is 0, whose row is sin(0) = 0 and cos(0) = 1 in every pair.",
                (_sinusoidal_like(first=1),)),
    ),
    mutants=(
        Mutant("multiplied_by_the_frequency_term", "multiplies pos by 10000^(2i / d) instead of dividing",
               _multiplied_by_the_frequency_term),
        Mutant("transposed", "returns the (d_model, n_ctx) table", _transposed),
        Mutant("float64", "returns float64 instead of float32", _float64),
    ),
)


# --- 02.position_rows ---------------------------------------------------------------------------------------------------


def reference_position_rows(table, seq_len, offset):
    """Rows ``offset`` … ``offset + seq_len - 1`` of a learned position table; ValueError when that runs past it."""
    check_sequence_fits(offset + seq_len, table.shape[0])
    return table[offset : offset + seq_len]


def _rows_cases(generator: torch.Generator) -> list[Case]:
    table = torch.randn(8, 4, generator=generator)
    return [
        Case.of(table=table, seq_len=5, offset=0, note="a prompt of 5"),
        Case.of(table=table, seq_len=1, offset=5, note="one new token after 5 cached ones"),
        Case.of(table=table, seq_len=3, offset=4, note="3 new tokens after 4"),
        Case.of(table=table, seq_len=2, offset=6, note="the last two rows"),
        Case.of(table=table, seq_len=3, offset=6, note="past the table: a ValueError"),
        Case.of(table=table, seq_len=9, offset=0, note="a prompt longer than the table: a ValueError"),
    ]


@mistake_builder
def _rows_like(*, window="offset", check=True, last_only=False):
    """A learner's position_rows; each keyword reproduces one way of getting it wrong. ``window`` is the slice:
    "offset" (right), "from_zero" (the offset ignored), "to_seq_len" (ending at row seq_len), "one_late"."""

    def position_rows(table, seq_len, offset):
        if check and offset + seq_len > table.shape[0]:
            raise ValueError("too long")
        start, stop = {"offset": (offset, offset + seq_len), "from_zero": (0, seq_len),
                       "to_seq_len": (offset, seq_len), "one_late": (offset + 1, offset + seq_len + 1)}[window]
        return table[stop - 1 : stop] if last_only else table[start:stop]

    return position_rows


def _wraps_around(table, seq_len, offset):
    return table[torch.arange(offset, offset + seq_len) % table.shape[0]]


def _checks_only_seq_len(table, seq_len, offset):
    if seq_len > table.shape[0]:
        raise ValueError("seq_len too long")
    return table[offset : offset + seq_len]


def _index_error(table, seq_len, offset):
    if offset + seq_len > table.shape[0]:
        raise IndexError("past the table")
    return table[offset : offset + seq_len]


POSITION_ROWS = Exercise(
    id="02.position_rows",
    forbidden=(LearnedPositionalEmbedding, SinusoidalPositionalEncoding),
    reference=reference_position_rows,
    cases=_rows_cases,
    points=1,
    outputs=("the rows",),
    axes={"the rows": "position dimension"},
    checked=(
        "a prompt from position 0, one and three new tokens after cached ones, the last two rows of the table, and "
        "two windows past the table (ValueError)"
    ),
    mistakes=(
        Mistake("offset_ignored", "ignored the offset, so new tokens get the positions of the first ones",
                "After a cache of `offset` tokens, the next token is position `offset`, not 0: read seq_len rows "
                "starting at row `offset`.", (_rows_like(window="from_zero"),)),
        Mistake("end_index_is_seq_len", "ended the slice at seq_len instead of offset + seq_len",
                "The window has seq_len rows starting at offset, so it ends seq_len rows after offset, not at row "
                "seq_len.",
                (_rows_like(window="to_seq_len"),)),
        Mistake("off_by_one", "started one row too late",
                "Positions count from 0: `offset` cached tokens occupy rows 0 … offset - 1, so the next is row offset.",
                (_rows_like(window="one_late"),)),
        Mistake("no_length_check", "did not check that the window fits in the table",
                "Slicing past the end of a tensor returns fewer rows without an error, and the model then fails far "
                "from the cause: raise ValueError when offset + seq_len > table.shape[0].", (_rows_like(check=False),)),
        Mistake("last_row_only", "returned only the last position's row",
                "Return one row per new token: seq_len rows.", (_rows_like(last_only=True),)),
    ),
    mutants=(
        Mutant("wraps_around", "wraps past the end of the table instead of refusing", _wraps_around),
        Mutant("checks_only_seq_len", "compares seq_len alone with the table's length", _checks_only_seq_len),
        Mutant("index_error", "raises IndexError instead of ValueError", _index_error),
    ),
)


# --- 02.scaled_embedding ------------------------------------------------------------------------------------------------


def reference_scaled_embedding(tokens, weight):
    """§3.4: the rows of ``weight`` for ``tokens``, multiplied by √d_model."""
    return weight[tokens] * math.sqrt(weight.shape[1])


def _embedding_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(tokens=torch.tensor([[3, 0, 3, 9]]), weight=torch.randn(10, 16, generator=generator)),
        Case.of(tokens=torch.randint(50, (2, 5), generator=generator),
                weight=torch.randn(50, 64, generator=generator, dtype=torch.float64), note="d_model 64, d_vocab 50"),
        Case.of(tokens=torch.tensor([1, 2]), weight=torch.randn(4, 9, generator=generator),
                note="d_model 9, d_vocab 4: √9 = 3"),
        Case.of(tokens=torch.tensor([[0], [5]]), weight=torch.randn(6, 12, generator=generator), note="d_model 12"),
    ]


@mistake_builder
def _embedding_like(*, scale="sqrt_d_model", in_place=False):
    """A learner's scaled_embedding; each keyword reproduces one way of getting it wrong. ``scale`` is the factor:
    "sqrt_d_model" (right), "d_model", "none", "sqrt_d_vocab", or "divided" (by √d_model)."""

    def scaled(rows, weight):
        d_vocab, d_model = weight.shape
        if scale == "divided":
            return rows / math.sqrt(d_model)
        return rows * {"sqrt_d_model": math.sqrt(d_model), "d_model": d_model, "none": 1.0,
                       "sqrt_d_vocab": math.sqrt(d_vocab)}[scale]

    def scaled_embedding(tokens, weight):
        if in_place:
            weight.copy_(scaled(weight, weight))
            return weight[tokens]
        return scaled(weight[tokens], weight)

    return scaled_embedding


def _one_hot_in_float32(tokens, weight):
    one_hot = torch.nn.functional.one_hot(tokens, weight.shape[0]).float()
    return (one_hot @ weight.float()) * math.sqrt(weight.shape[1])


def _power_precedence(tokens, weight):
    return weight[tokens] * weight.shape[1] ** 1 / 2  # ** binds first: d_model / 2


def _integer_square_root(tokens, weight):
    return weight[tokens] * math.isqrt(weight.shape[1])


SCALED_EMBEDDING = Exercise(
    id="02.scaled_embedding",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(TokenEmbedding,),
    reference=reference_scaled_embedding,
    cases=_embedding_cases,
    points=1,
    outputs=("the embeddings",),
    checked="(batch, seq) and (seq,) token ids, d_model 16, 64, 9 and 12, float32 and float64",
    mistakes=(
        Mistake("scaled_by_d_model", "multiplied by d_model instead of √d_model",
                "§3.4 multiplies by the square root of d_model (`math.sqrt`), not by d_model itself.",
                (_embedding_like(scale="d_model"),)),
        Mistake("not_scaled", "forgot the √d_model", "§3.4: the looked-up rows are multiplied by √d_model.",
                (_embedding_like(scale="none"),)),
        Mistake("scaled_by_sqrt_d_vocab", "scaled by √d_vocab, the table's first axis, instead of √d_model",
                "weight is (d_vocab, d_model): d_model is the size of its second axis, not its first.",
                (_embedding_like(scale="sqrt_d_vocab"),)),
        Mistake("divided", "divided by √d_model instead of multiplying",
                "The embedding is scaled *up* so that it is not drowned by the positional encoding.", (_embedding_like(scale="divided"),)),
        Mistake("scaled_the_table_in_place", "scaled the embedding table itself in place",
                "Scaling `weight` in place changes the model's parameter for every later call: scale the looked-up "
                "rows instead, into a new tensor.", (_embedding_like(in_place=True),)),
    ),
    mutants=(
        Mutant("one_hot_in_float32", "multiplies a float32 one-hot matrix, so float64 comes back as float32",
               _one_hot_in_float32),
        Mutant("power_precedence", "writes d_model ** 1 / 2, which is d_model / 2", _power_precedence),
        Mutant("integer_square_root", "scales by the integer square root, math.isqrt(d_model)", _integer_square_root),
    ),
)


# --- 02.embed_inputs (build: the input layer of the Transformer, composed of the pieces above) ----------------------


def reference_embed_inputs(tokens, weight, pe, offset):
    """§3.4 + §3.5: each token's row of ``weight`` times √d_model, plus the row of ``pe`` for its position.

    Positions are ``offset``, ``offset + 1``, … along the sequence axis (the last axis of ``tokens``); ValueError when
    they run past ``pe``.
    """
    return reference_scaled_embedding(tokens, weight) + reference_position_rows(pe, tokens.shape[-1], offset)


def _inputs_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    return [
        Case.of(tokens=torch.tensor([[3, 0, 3, 9, 1], [1, 1, 2, 7, 4]]), weight=randn(10, 8),
                pe=sinusoidal_positional_encoding(16, 8), offset=0, note="a batch of two prompts, sinusoidal positions"),
        Case.of(tokens=torch.tensor([[5, 2, 6]]), weight=randn(7, 6, dtype=torch.float64),
                pe=randn(9, 6, dtype=torch.float64), offset=4, note="3 new tokens after 4 cached ones, a learned table"),
        Case.of(tokens=torch.tensor([[2], [0], [2]]), weight=randn(3, 4), pe=randn(12, 4), offset=7,
                note="a batch of 3, one new token each after 7 cached ones"),
        Case.of(tokens=torch.tensor([[1, 1, 0, 1]]), weight=randn(2, 16), pe=sinusoidal_positional_encoding(8, 16),
                offset=0, note="the same token at four positions"),
        Case.of(tokens=torch.tensor([[0, 1, 2, 3]]), weight=randn(4, 4), pe=randn(6, 4), offset=3,
                note="past the table: a ValueError"),
    ]


@mistake_builder
def _inputs_with(*, scale_at="token", rows="offset", check=True):
    """The input layer with one composition choice made wrongly, as a learner combines the three exercises."""
    def embed_inputs(tokens, weight, pe, offset):
        seq = tokens.shape[-1]
        if check and offset + seq > pe.shape[0]:
            raise ValueError("the positions do not fit in the table")
        if rows == "offset":
            positions = pe[offset : offset + seq]
        elif rows == "from_zero":
            positions = pe[:seq]
        elif rows == "token_ids":
            positions = pe[tokens]
        else:  # "batch_axis": one position per sequence of the batch, shared by all its tokens
            positions = pe[offset : offset + tokens.shape[0]][:, None, :]
        scale = math.sqrt(weight.shape[1])
        if scale_at == "token":
            return weight[tokens] * scale + positions
        if scale_at == "sum":
            return (weight[tokens] + positions) * scale
        if scale_at == "positions":
            return weight[tokens] + positions * scale
        return weight[tokens] + positions  # "nowhere"

    return embed_inputs


def _concatenated(tokens, weight, pe, offset):
    seq = tokens.shape[-1]
    if offset + seq > pe.shape[0]:
        raise ValueError("the positions do not fit in the table")
    positions = pe[offset : offset + seq].expand(*tokens.shape, pe.shape[1])
    return torch.cat([weight[tokens] * math.sqrt(weight.shape[1]), positions], dim=-1)


def _positions_subtracted(tokens, weight, pe, offset):
    return reference_scaled_embedding(tokens, weight) - reference_position_rows(pe, tokens.shape[-1], offset)


def _one_position_late(tokens, weight, pe, offset):
    return reference_embed_inputs(tokens, weight, pe, offset + 1) if offset + tokens.shape[-1] < pe.shape[0] \
        else reference_embed_inputs(tokens, weight, pe, offset)


def _scaled_by_d_model_both(tokens, weight, pe, offset):
    return weight[tokens] * weight.shape[1] + reference_position_rows(pe, tokens.shape[-1], offset)


EMBED_INPUTS = Exercise(
    id="02.embed_inputs",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(TokenEmbedding, LearnedPositionalEmbedding, SinusoidalPositionalEncoding, sinusoidal_positional_encoding),
    reference=reference_embed_inputs,
    cases=_inputs_cases,
    points=3,
    outputs=("the layer's output",),
    axes={"the layer's output": "seq d_model"},
    checked=(
        "a batch of prompts with sinusoidal positions, new tokens after cached ones with a learned table (float64), a "
        "batch of single new tokens, the same token at four positions, and a window past the table (ValueError)"
    ),
    mistakes=(
        Mistake("scaled_the_sum", "multiplied the sum token + position by √d_model",
                "§3.4 scales the embedding weights only: multiply the token rows by √d_model first, then add the "
                "position rows.", (_inputs_with(scale_at="sum"),)),
        Mistake("scaled_the_positions", "scaled the positions by √d_model instead of the tokens",
                "The factor belongs to the token embedding: it lifts the token vectors to the size of the positional "
                "ones.", (_inputs_with(scale_at="positions"),)),
        Mistake("not_scaled", "added the positions to unscaled token rows",
                "§3.4: the token rows are multiplied by √d_model before the positions are added; without it the sum is "
                "almost all position.", (_inputs_with(scale_at="nowhere"),)),
        Mistake("positions_by_token_id", "looked up the position table with the token ids",
                "The position table is indexed by where a token stands (offset, offset + 1, …), not by which token it "
                "is: indexing it with the token ids makes two equal tokens share a position.",
                (_inputs_with(rows="token_ids"),)),
        Mistake("offset_ignored", "ignored the offset, so new tokens get the positions of the first ones",
                "After `offset` cached tokens, the first new one stands at position `offset`: read the rows from "
                "there (exercise 2).", (_inputs_with(rows="from_zero"),)),
        Mistake("positions_along_the_batch", "took one position per sequence of the batch instead of one per token",
                "tokens is (batch, seq): the positions run along the last axis, one row per token of a sequence, "
                "broadcast over the batch.", (_inputs_with(rows="batch_axis"),)),
        Mistake("concatenated", "concatenated the positions to the token vectors instead of adding them",
                "§3.5: the positional encodings are *summed* with the embeddings, so both have d_model columns and "
                "the result keeps d_model.", (_concatenated,)),
    ),
    mutants=(
        Mutant("positions_subtracted", "subtracts the positions", _positions_subtracted),
        Mutant("one_position_late", "reads positions from offset + 1", _one_position_late),
        Mutant("scaled_by_d_model", "scales the tokens by d_model instead of √d_model", _scaled_by_d_model_both),
    ),
)


# --- 02.predict_position_norm (predict, then measure: how large a positional encoding is) ----------------------------


def position_norm(d_model=64, position=37):
    """The Euclidean norm of one row of the sinusoidal table of §3.5 (the package's, float32)."""
    return sinusoidal_positional_encoding(position + 1, d_model)[position].norm().item()


PREDICT_POSITION_NORM = predict_number(
    "02.predict_position_norm",
    measure=position_norm,
    question="the norm of PE(37) at d_model = 64",
    within=1.25,
    points=1,
    misconceptions=[
        Misconception("unit_vector", 1.0, "expected a positional encoding to be a unit vector",
                      "Each of the d_model / 2 pairs (sin, cos) is a point on the unit circle, so each pair contributes "
                      "1 to the squared norm: nothing normalises the whole row."),
        Misconception("every_entry_one", 8.0, "expected every entry to be ±1, which gives √d_model",
                      "sin and cos of the same angle are never both ±1: sin² + cos² = 1 per pair, so the squared norm "
                      "is d_model / 2, not d_model."),
        Misconception("squared_norm", 32.0, "gave the squared norm, d_model / 2, without the square root",
                      "The squared norm is d_model / 2 = 32: the norm is its square root."),
        Misconception("d_model", 64.0, "expected the norm to be d_model",
                      "A norm adds squares, then takes a root: each pair adds sin² + cos² = 1."),
    ],
    mutants=[
        wrong_prediction("far_too_large", 500.0, "the norm of a row of 64 numbers between -1 and 1 cannot pass 8"),
        wrong_prediction("too_small", 2.5, "a guess between the unit vector and the truth"),
    ],
)


# --- 02.predict_position_recovered (predict, then measure: can the position be read back from the input?) -----------

RECOVERY_D_MODEL, RECOVERY_POSITIONS, RECOVERY_VOCAB = 64, 128, 1000


def positions_recovered(*, scale: bool = True, seed: int = 0) -> tuple[float, float]:
    """The paper's input x_p = TokenEmbedding(scale=True)(token_p) + PE(p) for 128 random tokens (embedding built after
    ``torch.manual_seed(seed)``, tokens from a generator seeded with ``seed``), d_model = 64. Each position is read back
    as the q whose encoding PE(q) has the largest dot product with x_p: the share read back exactly, and within two
    positions. ``scale=False`` is GPT-2's embedding (std 0.02, no scaling)."""
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(seed)
        embedding = TokenEmbedding(RECOVERY_VOCAB, RECOVERY_D_MODEL, scale=scale)
    tokens = torch.randint(0, RECOVERY_VOCAB, (1, RECOVERY_POSITIONS), generator=torch.Generator().manual_seed(seed))
    encoding = sinusoidal_positional_encoding(RECOVERY_POSITIONS, RECOVERY_D_MODEL).double()
    with torch.no_grad():  # float64: no near tie is read differently by another CPU's rounding
        read = ((embedding(tokens)[0].double() + encoding) @ encoding.T).argmax(dim=-1)
    off = (read - torch.arange(RECOVERY_POSITIONS)).abs()
    return (off == 0).double().mean().item(), (off <= 2).double().mean().item()


PREDICT_POSITION_RECOVERED = predict_number(
    "02.predict_position_recovered",
    measure=lambda: positions_recovered()[0],
    question="the share of 128 positions read back exactly from the paper's scaled input at d_model = 64",
    within=1.3,
    points=1,
    misconceptions=[
        Misconception("always_readable", 1.0, "expected every position to be read back, since every encoding differs",
                      "The encodings differ, but neighbouring ones differ little, while the scaled embedding added to "
                      "them is as long as the encoding itself: it can tip the reading to a neighbour."),
        Misconception("drowned_to_chance", 1 / 128, "expected the embedding to drown the position completely, leaving a "
                      "random guess among 128",
                      "The embedding is unrelated to every encoding, so it shifts all the dot products about equally; "
                      "the right encoding's own dot product stands well above distant positions'."),
        Misconception("never_exact", 0.0, "expected the embedding to move every reading off the right position",
                      "Added noise moves a reading only when it outweighs the gap to a neighbour's dot product; that "
                      "happens often, but not always."),
        Misconception("counted_neighbours", 0.91, "counted a position read one or two places off as read back",
                      "The question asks for the exact position. Near misses are many here, and a model can use them, "
                      "but they do not count as exact."),
    ],
    mutants=[
        wrong_prediction("a_tenth", 0.1, "far below what the encoding's size allows"),
        wrong_prediction("twice", 2.0, "a share cannot exceed 1"),
    ],
)

# --- 02.token_embedding and 02.position_embedding (the build track's first modules) -----------------------------------


def reference_token_embedding(d_vocab: int, d_model: int, scale: bool = False) -> nn.Module:
    """The package's TokenEmbedding, built with the exercise's positional ``scale``."""
    return TokenEmbedding(d_vocab, d_model, scale=scale)


def _token_module_cases(generator: torch.Generator) -> list[Case]:
    def table(d_vocab: int, d_model: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        return {"weight": torch.randn(d_vocab, d_model, generator=generator, dtype=dtype)}

    return [
        Case.of(sizes=(10, 16, False), weights=table(10, 16), tokens=torch.tensor([[3, 0, 3, 9]]),
                note="GPT-2's: not scaled"),
        Case.of(sizes=(50, 64, True), weights=table(50, 64, torch.float64),
                tokens=torch.randint(50, (2, 5), generator=generator), note="the paper's §3.4: scaled by √64"),
        Case.of(sizes=(4, 9, True), weights=table(4, 9), tokens=torch.tensor([[1], [2]]), note="scaled by √9 = 3"),
        Case.of(sizes=(6, 8, False), weights=table(6, 8), tokens=torch.tensor([[2, -1]]),
                note="a negative id: a ValueError"),
        Case.of(sizes=(6, 8, False), weights=table(6, 8), tokens=torch.tensor([[5, 6]]),
                note="an id past d_vocab: a ValueError"),
    ]


def _token_module_call(cls, args):
    sizes, weights, tokens = args
    return run_module(cls, sizes, weights, (tokens,), what="TokenEmbedding(d_vocab, d_model, scale)")


@mistake_builder
def _token_module_like(*, factor="sqrt_d_model", when="scale", check_ids=True):
    """A learner's TokenEmbedding; ``factor`` is what a scaled lookup is multiplied by ("sqrt_d_model", "d_model"),
    ``when`` when it is scaled ("scale", "always", "never"), ``check_ids`` whether ids are refused outside the table."""

    class MyTokenEmbedding(nn.Module):
        def __init__(self, d_vocab, d_model, scale=False):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(d_vocab, d_model))
            scaled = {"scale": scale, "always": True, "never": False}[when]
            self.factor = (math.sqrt(d_model) if factor == "sqrt_d_model" else d_model) if scaled else 1.0

        def forward(self, tokens):
            if check_ids and (tokens.min() < 0 or tokens.max() >= self.weight.shape[0]):
                raise ValueError("token id outside the table")
            return self.weight[tokens] * self.factor

    return MyTokenEmbedding


class _OneHotTokenEmbedding(_token_module_like()):
    def forward(self, tokens):
        one_hot = torch.nn.functional.one_hot(tokens.clamp(min=0), self.weight.shape[0]).float()
        return one_hot @ self.weight.float() * self.factor


class _DividedTokenEmbedding(_token_module_like()):
    def forward(self, tokens):
        rows = super().forward(tokens)
        return rows / self.factor ** 2 if self.factor != 1.0 else rows


_NO_LOOKUP = (TokenEmbedding, LearnedPositionalEmbedding, nn.Embedding, F.embedding)

TOKEN_EMBEDDING = Exercise(
    id="02.token_embedding",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=_NO_LOOKUP,
    reference=reference_token_embedding,
    call=_token_module_call,
    cases=_token_module_cases,
    points=2,
    outputs=("the embeddings",),
    checked=(
        "tables of 10, 50, 4 and 6 rows (float32 and float64), unscaled as GPT-2 and scaled as §3.4, their weights "
        "put in your module by name, and ids outside the table (ValueError): the rows and the gradient of the table"
    ),
    mistakes=(
        Mistake("scale_ignored", "did not scale the rows when `scale` is True",
                "With `scale=True` (§3.4) the looked-up rows are multiplied by √d_model.",
                (_token_module_like(when="never"),)),
        Mistake("always_scaled", "scaled the rows even when `scale` is False",
                "GPT-2 does not scale its token embedding: multiply by √d_model only when `scale` is True.",
                (_token_module_like(when="always"),)),
        Mistake("scaled_by_d_model", "multiplied by d_model instead of √d_model",
                "§3.4 multiplies by the square root of d_model, not by d_model itself.",
                (_token_module_like(factor="d_model"),)),
        Mistake("ids_not_checked", "looked up ids outside the table without refusing them",
                "A negative id silently reads a row from the end of the table (Python's indexing): raise a "
                "ValueError for any id below 0 or at least d_vocab before the lookup.",
                (_token_module_like(check_ids=False),)),
    ),
    mutants=(
        Mutant("one_hot_in_float32", "multiplies a float32 one-hot matrix and clamps the ids", _OneHotTokenEmbedding),
        Mutant("divided", "divides by √d_model when scaled", _DividedTokenEmbedding),
    ),
)


def _position_module_cases(generator: torch.Generator) -> list[Case]:
    table = {"weight": torch.randn(8, 4, generator=generator)}
    return [
        Case.of(sizes=(8, 4), weights=table, seq_len=5, offset=0, note="a prompt of 5"),
        Case.of(sizes=(8, 4), weights=table, seq_len=1, offset=5, note="one new token after 5 cached ones"),
        Case.of(sizes=(8, 4), weights=table, seq_len=3, offset=4, note="3 new tokens after 4"),
        Case.of(sizes=(8, 4), weights=table, seq_len=3, offset=6, note="past the table: a ValueError"),
        Case.of(sizes=(16, 6), weights={"weight": torch.randn(16, 6, generator=generator, dtype=torch.float64)},
                seq_len=16, offset=0, note="the whole table, float64"),
    ]


def _position_module_call(cls, args):
    sizes, weights, seq_len, offset = args
    return run_module(cls, sizes, weights, (seq_len, offset), what="PositionEmbedding(n_ctx, d_model)")


def _position_module(rows) -> type:
    """A learner's PositionEmbedding whose forward reads its table with ``rows(table, seq_len, offset)``."""

    class MyPositionEmbedding(nn.Module):
        def __init__(self, n_ctx, d_model):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(n_ctx, d_model))

        def forward(self, seq_len, offset=0):
            return rows(self.weight, seq_len, offset)

    return MyPositionEmbedding


POSITION_EMBEDDING = Exercise(
    id="02.position_embedding",
    gradients=True,
    forbidden=_NO_LOOKUP,
    reference=LearnedPositionalEmbedding,
    call=_position_module_call,
    cases=_position_module_cases,
    points=2,
    outputs=("the rows",),
    axes={"the rows": "position dimension"},
    checked=(
        "a table of 8 positions read for a prompt, for one and three tokens after cached ones and past its end "
        "(ValueError), and a float64 table of 16 read whole: the rows and the gradient of the table"
    ),
    mistakes=(
        Mistake("offset_ignored", "ignored the offset, so new tokens get the positions of the first ones",
                "After `offset` cached tokens the next token is position `offset`: read seq_len rows from there.",
                (_position_module(_rows_like(window="from_zero")),)),
        Mistake("off_by_one", "started one row too late",
                "Positions count from 0: the first new token after `offset` cached ones is row offset.",
                (_position_module(_rows_like(window="one_late")),)),
        Mistake("no_length_check", "did not refuse a window that runs past the table",
                "Slicing past the end of a tensor returns fewer rows without an error: raise a ValueError when "
                "offset + seq_len is more than the table's length.", (_position_module(_rows_like(check=False)),)),
        Mistake("last_row_only", "returned only the last position's row",
                "Return one row per new token: seq_len rows.", (_position_module(_rows_like(last_only=True)),)),
    ),
    mutants=(
        Mutant("wraps_around", "wraps past the end of the table instead of refusing", _position_module(_wraps_around)),
        Mutant("index_error", "raises IndexError instead of ValueError", _position_module(_index_error)),
    ),
)


register(SINUSOIDAL, POSITION_ROWS, SCALED_EMBEDDING, EMBED_INPUTS, PREDICT_POSITION_NORM,
         PREDICT_POSITION_RECOVERED, TOKEN_EMBEDDING, POSITION_EMBEDDING)
