"""tutorial_lib: the package built, one component per chapter, by *The Transformer, From Scratch*.

Modules follow the order of the book:

=====================  ==================================================
``tokenizers``         01  character tokenizer, byte-pair encoding
``embeddings``         02  token embedding, learned and sinusoidal positions
``attention``          03  scaled dot-product attention and its masks
``multi_head``         04  multi-head attention (loop and fused), KV cache
``feed_forward``       05  position-wise feed-forward, SwiGLU
``normalization``      06  LayerNorm, RMSNorm
``blocks``             06  residual blocks with post-, pre- and sandwich norm
``models.transformer`` 07  the encoder-decoder Transformer of the paper
``decoding``           07  greedy and beam search for sequence-to-sequence
``models.gpt``         08  a decoder-only GPT (GPT-2's architecture)
``training``           09  schedules, label smoothing, the training loop
``sampling``           10  temperature, top-k, top-p, ``generate``
``rope``               12  rotary position embeddings
``efficient_attention``13  sliding window, linear and tiled attention
``models.bert``        14  an encoder-only BERT
``counting``           --  parameter counting
``data``               --  tiny Shakespeare, generated toy tasks
=====================  ==================================================
"""

__version__ = "0.1.0"
