"""tutorial_lib: the package built, one component per chapter, by *The Transformer, From Scratch*.

Modules follow the order of the book:

==============================  ==================================================
``tokenizers``                  01  character tokenizer, byte-pair encoding
``embeddings``                  02  token embedding, learned and sinusoidal positions
``attention``                   03  scaled dot-product attention and its masks
``multi_head``                  04  multi-head attention (loop and fused)
``head_ablation``               04  knocking heads out: a head's output replaced by its mean (or zero)
``feed_forward``                05  position-wise feed-forward, SwiGLU
``normalization``               06  LayerNorm, RMSNorm
``blocks``                      06  residual blocks with post-, pre- and sandwich norm
``models.transformer``          07  the encoder-decoder Transformer of the paper
``decoding``                    07  greedy and beam search for sequence-to-sequence
``recipes.date_transformer``    07  the Transformer trained on date normalisation (cached)
``models.gpt``                  08  a decoder-only GPT (GPT-2's architecture)
``training``                    09  schedules, label smoothing, the training loop (fp32, or bf16 autocast)
``progress``                    09  the line a cell that trains shows: what runs, its time on CI and here, how far
``recipes``                     09  trained models shared by chapters (trained once, cached), one module per recipe
``recipes.cache``               09  a recipe's file name; training under a file lock, then loading
``recipes.char_gpt``            09  the character-level GPT the chapters share, and its kept runs
``sampling``                    10  temperature, top-k, top-p, ``generate``
``kv_cache``                    10  the key/value cache of generation
``recipes.ablation``            11  the ablation grid: one component removed per run
``rope``                        12  rotary position embeddings
``models.llama``                12  a LLaMA-style decoder (RoPE, RMSNorm, SwiGLU)
``recipes.positions``           12  learned, rotary and sinusoidal positions compared
``efficient_attention``         13  sliding window, linear and tiled attention, FlashAttention's backward
``models.bert``                 14  an encoder-only BERT, its masking and heads
``recipes.bert``                14  tiny-BERT pre-training and fine-tuning (cached)
``distributed``                 15  process groups, sharding, the ring all-reduce, gradient accumulation, a step's timeline
``train_data_parallel``         15  the torchrun entry point (DDP or FSDP2) over the book's GPT and training loop
``memory_per_rank``             15  peak memory and traffic per rank in one update (1 process, DDP, FSDP2), from the profiler
``scaling_out``                 15  what changes on 8 GPUs, run on gloo: bf16, seeds, join(), logged metrics, DCP checkpoints
``counting``                    --  parameter counting
``stats``                       --  results over seeds, two settings compared paired by seed (a t-interval)
``data``                        --  tiny Shakespeare, its speeches (14), generated dates (07) and copying (13) tasks
``widgets``                     --  the chapters' figures and interactive explorers
``checks``, ``grade``           --  the exercises' checks (one module per chapter) and a grader for a class's notebooks
``environment``                 --  seeding and device choice of a notebook's first cell
``machine_speed``               00  this machine's matmul speed, each chapter's expected time here, the CPU's kernels
==============================  ==================================================
"""

__version__ = "0.1.0"
