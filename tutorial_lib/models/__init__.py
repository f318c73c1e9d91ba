"""Whole models assembled from the components: the paper's Transformer, GPT, BERT."""
