"""The learner's own transformer, carried from one exercise notebook to the next.

The build exercises of chapters 03 onwards add up to a model of the learner's own. A build exercise's cell starts with
the line ``%%my_transformer attention``: running it saves the rest of the cell to ``my_transformer/attention.py``
beside the notebook, runs that file as a module, and puts its names into the notebook, as running the cell itself
would. A later chapter imports the learner's file like any module, ``from my_transformer.attention import ...``, so
its exercises build on the learner's answers, not on the package's. In Colab, whose files vanish with the session,
the folder is uploaded again (or kept on Google Drive); :func:`require` says which chapter writes a missing file.

The notebooks register the magic through :func:`tutorial_lib.environment.setup_notebook`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

PACKAGE = "my_transformer"
# Each file of the learner's package, and the exercise whose cell writes it.
WRITTEN_BY = {
    "embeddings": "chapter 02, exercise 7 (the TokenEmbedding and PositionEmbedding modules)",
    "attention": "chapter 03, exercise 1 (scaled dot-product attention)",
    "split_heads": "chapter 04, exercise 1 (split into heads)",
    "merge_heads": "chapter 04, exercise 2 (merge the heads)",
    "multi_head": "chapter 04, exercise 3 (the MultiHeadAttention module)",
    "gelu_tanh": "chapter 05, exercise 2 (GELU, the tanh form)",
    "feed_forward": "chapter 05, exercise 5 (the FeedForward module)",
    "layer_norm": "chapter 06, exercise 1 (LayerNorm)",
    "block": "chapter 06, exercise 5 (the LayerNorm and Block modules)",
    "gpt": "chapter 08, exercise 3 (the GPT module)",
    "schedule": "chapter 09, exercise 1 (the warm-up + cosine schedule)",
    "train_step": "chapter 09, exercise 2 (one training step)",
    "batches": "chapter 09, exercise 3 (the batches of a language model)",
    "training": "chapter 09, exercise 5 (the training loop)",
    "cached_attention": "chapter 10, exercise 4 (attention with a KV cache)",
    "cached_gpt": "chapter 10, exercise 9 (your GPT with a KV cache)",
    "ablated_gpt": "chapter 11, exercise 6 (your GPT without the parts you remove)",
    "transformer": "chapter 07, exercise 9 (your encoder-decoder Transformer)",
    "bert": "chapter 14, exercise 7 (your BERT, with its masked-LM head)",
}
PACKAGE_DOC = (
    '"""Your own transformer, written by the build exercises (the %%my_transformer cells) of the exercise notebooks.\n\n'
    'Each file is rewritten when its cell runs again: edit the cell, not the file."""\n'
)
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def module_source(cell_body: str) -> str:
    """The text of a module file written from a cell's body (the cell without its ``%%my_transformer`` line)."""
    return cell_body.rstrip() + "\n"


def cell_python(cell_source: str) -> str:
    """A cell's Python: its ``%%my_transformer NAME`` line, when it has one, left out (for tools that parse cells)."""
    first, _, rest = cell_source.partition("\n")
    return rest if first.startswith("%%my_transformer") else cell_source


def _checked_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name.strip()):
        raise ValueError(f"name must be a module name such as 'attention' (lower case, digits, _), got {name!r}")
    return name.strip()


def _write_if_changed(path: Path, text: str) -> None:
    """Write atomically (a notebook run beside another never reads half a file), and only when the text changed.

    A cached ``.pyc`` is trusted while the source keeps its size and its modification time in whole seconds, so a
    cell edited and run again within a second could import its old version: the new file gets a later second, and
    this process's cached bytecode of it is removed."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    before = path.stat().st_mtime if path.exists() else None
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp") as file:
        file.write(text)
    os.replace(file.name, path)
    if before is not None and int(path.stat().st_mtime) <= int(before):
        os.utime(path, (int(before) + 1, int(before) + 1))
    with contextlib.suppress(OSError, NotImplementedError, ValueError):
        Path(importlib.util.cache_from_source(str(path))).unlink()


def save_module(name: str, cell_body: str, folder: Path | str | None = None) -> Path:
    """Save ``cell_body`` as ``my_transformer/<name>.py`` under ``folder`` (default: the current directory)."""
    package = Path(folder or Path.cwd()) / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    _write_if_changed(package / "__init__.py", PACKAGE_DOC)
    path = package / f"{_checked_name(name)}.py"
    _write_if_changed(path, module_source(cell_body))
    return path


def load_module(name: str, folder: Path | str | None = None) -> ModuleType:
    """Import ``my_transformer.<name>`` afresh from ``folder`` (default: the current directory): a cell run again
    replaces what an earlier run defined."""
    root = str(Path(folder or Path.cwd()).resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    full = f"{PACKAGE}.{_checked_name(name)}"
    package = sys.modules.get(PACKAGE)
    if package is not None and Path(package.__file__ or "").resolve().parent.parent != Path(root):
        del sys.modules[PACKAGE]  # another folder's my_transformer was imported before
    sys.modules.pop(full, None)
    importlib.invalidate_caches()
    return importlib.import_module(full)


def require(*names: str, folder: Path | str | None = None) -> None:
    """Raise a ``FileNotFoundError`` that names the exercise to run when a file of ``my_transformer`` is missing."""
    package = Path(folder or Path.cwd()) / PACKAGE
    missing = [name for name in map(_checked_name, names) if not (package / f"{name}.py").exists()]
    if missing:
        lines = [f"  {PACKAGE}/{name}.py: written by {WRITTEN_BY.get(name, 'a build exercise')}" for name in missing]
        raise FileNotFoundError(
            f"This notebook builds on your own earlier answers, and the {PACKAGE} folder beside it lacks:\n"
            + "\n".join(lines) + "\n"
            "Run that exercise's %%my_transformer cell first (in the same folder as this notebook). In Colab, upload "
            f"your {PACKAGE} folder to the Files pane, or keep it on Google Drive and change to its folder (%cd).")


def my_gpt_state_dict(book_state_dict: dict) -> dict:
    """The book's GPT weights under the names of the learner's GPT (chapter 08): the package's blocks keep each norm in
    their ``Residual`` (``blocks.0.attn_residual.norm.weight``), the learner's ``Block`` names them as GPT-2 does
    (``blocks.0.ln_1.weight``). Every other name is the same in both."""
    renames = {".attn_residual.norm.": ".ln_1.", ".ffn_residual.norm.": ".ln_2."}
    mapped = {}
    for name, tensor in book_state_dict.items():
        for old, new in renames.items():
            name = name.replace(old, new)
        mapped[name] = tensor
    return mapped


def my_transformer_name(book_name: str) -> str | None:
    """The learner's name for one weight of the book's encoder-decoder (chapter 07's ``Transformer``), or None for the
    two that are the shared embedding matrix again (``tgt_embed.weight``, ``unembed.weight``): the learner's model holds
    it once, as ``embed.weight``. The layers are ``encoder_layers.i`` and ``decoder_layers.i``, their norms named by
    order (``ln_1`` after the first sublayer, ``ln_2`` after the second, ``ln_3`` after the decoder's third)."""
    if book_name in ("tgt_embed.weight", "unembed.weight"):
        return None
    renames = {"src_embed.": "embed.", "encoder.layers.": "encoder_layers.", "decoder.layers.": "decoder_layers.",
               ".attn_residual.norm.": ".ln_1.", ".self_attn_residual.norm.": ".ln_1.",
               ".cross_attn_residual.norm.": ".ln_2."}
    for old, new in renames.items():
        book_name = book_name.replace(old, new)
    third = ".ln_3." if book_name.startswith("decoder_layers.") else ".ln_2."
    return book_name.replace(".ffn_residual.norm.", third)


def my_transformer_state_dict(book_state_dict: dict) -> dict:
    """The book's date Transformer's weights under the names of the learner's (chapter 07); see
    :func:`my_transformer_name`."""
    return {new: tensor for name, tensor in book_state_dict.items() if (new := my_transformer_name(name)) is not None}


_BERT_RENAMES = {"bert.": "", ".attn_residual.norm.": ".ln_1.", ".ffn_residual.norm.": ".ln_2.", "mlm.dense.": "mlm_dense.",
                 "mlm.norm.": "mlm_norm.", "mlm.decoder.bias": "mlm_bias"}


def my_bert_name(book_name: str) -> str | None:
    """The learner's name for one weight of the book's pre-trained BERT (``BERTForPreTraining``), or None for one the
    learner's BERT does not hold: the next-sentence head, and the MLM decoder's matrix (the token embedding, tied)."""
    if book_name.startswith("nsp.") or book_name == "mlm.decoder.weight":
        return None
    for old, new in _BERT_RENAMES.items():
        book_name = book_name.replace(old, new)
    return book_name


def my_bert_state_dict(book_state_dict: dict) -> dict:
    """The book's pre-trained BERT's weights under the names of the learner's BERT (chapter 14): the encoder's without
    the ``bert.`` prefix and with GPT-2's names for the blocks' norms (``ln_1`` after attention, ``ln_2`` after the
    FFN), the masked-LM head as ``mlm_dense``, ``mlm_norm`` and ``mlm_bias``; see :func:`my_bert_name`."""
    return {new: tensor for name, tensor in book_state_dict.items() if (new := my_bert_name(name)) is not None}


def my_transformer(line: str, cell: str) -> None:
    """The ``%%my_transformer NAME`` cell magic: save the cell as ``my_transformer/NAME.py``, run it as a module and
    define its names in the notebook."""
    from IPython import get_ipython

    name = _checked_name(line)
    save_module(name, cell)
    module = load_module(name)
    shell = get_ipython()
    shell.user_ns.update({key: value for key, value in vars(module).items() if not key.startswith("_")})


def register_magic() -> bool:
    """Make ``%%my_transformer`` available in the running IPython kernel; False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.register_magic_function(my_transformer, "cell", "my_transformer")
    return True
