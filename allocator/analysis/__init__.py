"""Analyses built on the model: the paper's worked examples recomputed."""
